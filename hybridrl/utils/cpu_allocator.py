"""The host memory allocator of CPU training workers (``HYBRIDRL_CPU_ALLOCATOR``).

glibc's ``malloc`` serves every allocation above its mmap threshold (at most 32 MiB) with a fresh ``mmap``
and gives it back with ``munmap`` on free. PyTorch on CPU has no caching allocator, so each step's large
tensors (logits, FSDP's gathered parameters, the embedding gradient) are zero-filled pages faulted in again
every time: on the reference 2-core VM, one SmolLM2 GRPO update spent a quarter of its CPU time in the kernel
(4.4 M page faults). tcmalloc keeps freed memory for reuse (the update 2.0x faster there); glibc with a high
mmap and trim threshold recovers part of it without installing anything
(benchmarks/results/2026-12-05-perf-host-allocator.md).

``HYBRIDRL_CPU_ALLOCATOR``:

- ``auto`` (default): tcmalloc when its library is installed (``apt install libtcmalloc-minimal4``), else the
  glibc settings;
- ``tcmalloc`` / ``jemalloc``: that library, an error naming the package when it is missing;
- ``glibc``: glibc's ``malloc`` with :data:`GLIBC_TUNED` (nothing to install);
- ``system``: the process environment as it is.

A user's own ``LD_PRELOAD`` allocator or ``GLIBC_TUNABLES`` is never replaced. The result is environment for
the Ray workers of a local CPU cluster (``LD_PRELOAD`` only takes effect in a new process).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_KEY = "HYBRIDRL_CPU_ALLOCATOR"
CHOICES = ("auto", "tcmalloc", "jemalloc", "glibc", "system")

# library file names in preference order, with the Debian/Ubuntu package that ships each
LIBRARIES = {
    "tcmalloc": (("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"), "libtcmalloc-minimal4"),
    "jemalloc": (("libjemalloc.so.2",), "libjemalloc2"),
}
SEARCH_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)

# glibc: every allocation below 32 MiB (the largest threshold glibc accepts) from the heap, freed memory kept
# (trim threshold 4 GiB) and the heap grown 256 MiB at a time
GLIBC_TUNED = (
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:glibc.malloc.top_pad=268435456"
)
# tcmalloc reports every allocation above 1 GiB on stderr unless told otherwise
TCMALLOC_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 50)}
# every variable a choice's ``env`` may set
ENV_VARS = ("LD_PRELOAD", "GLIBC_TUNABLES", *TCMALLOC_QUIET)


@dataclass(frozen=True)
class AllocatorChoice:
    """What :func:`choose_allocator` decided: ``name``, the ``env`` to add for new processes, one ``message``."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    message: str = ""


def find_library(kind: str, search_dirs: tuple[str, ...] = SEARCH_DIRS) -> str | None:
    """Path of the first installed ``kind`` library (``tcmalloc`` or ``jemalloc``), or None."""
    names, _ = LIBRARIES[kind]
    for name in names:
        for directory in search_dirs:
            hits = sorted(glob.glob(os.path.join(directory, name)))
            if hits:
                return hits[0]
    return None


def _preloaded_allocator(environ: Mapping[str, str]) -> str | None:
    preload = environ.get("LD_PRELOAD", "")
    return next((kind for kind in LIBRARIES if kind in preload), None)


def _preload(kind: str, path: str, environ: Mapping[str, str]) -> AllocatorChoice:
    preload = " ".join(p for p in (path, environ.get("LD_PRELOAD", "")) if p)
    env = {"LD_PRELOAD": preload, **(TCMALLOC_QUIET if kind == "tcmalloc" else {})}
    message = f"{kind} ({path}) preloaded into the CPU workers ({ENV_KEY}=system keeps glibc malloc)"
    return AllocatorChoice(kind, env, message)


def _glibc(environ: Mapping[str, str], reason: str) -> AllocatorChoice:
    if environ.get("GLIBC_TUNABLES"):
        return AllocatorChoice("system", {}, f"glibc malloc with your GLIBC_TUNABLES ({reason})")
    message = (
        f"glibc malloc with a 32 MiB mmap threshold and no trimming ({reason}); "
        f"tcmalloc is faster: apt install {LIBRARIES['tcmalloc'][1]}"
    )
    return AllocatorChoice("glibc", {"GLIBC_TUNABLES": GLIBC_TUNED}, message)


def choose_allocator(
    environ: Mapping[str, str] = os.environ, search_dirs: tuple[str, ...] = SEARCH_DIRS
) -> AllocatorChoice:
    """The allocator environment for new CPU worker processes, from ``environ[HYBRIDRL_CPU_ALLOCATOR]``.

    Raises:
        ValueError: an unknown setting, or ``tcmalloc``/``jemalloc`` asked for and not installed.
    """
    setting = environ.get(ENV_KEY, "auto").strip().lower() or "auto"
    if setting not in CHOICES:
        raise ValueError(f"{ENV_KEY}={setting!r} is not one of {', '.join(CHOICES)}")
    if setting == "system":
        return AllocatorChoice("system", {}, f"the system allocator ({ENV_KEY}=system)")
    preloaded = _preloaded_allocator(environ)
    if preloaded:
        return AllocatorChoice(preloaded, {}, f"{preloaded} from your LD_PRELOAD")
    if setting == "glibc":
        return _glibc(environ, f"{ENV_KEY}=glibc")
    kind = "tcmalloc" if setting == "auto" else setting
    path = find_library(kind, search_dirs)
    if path is not None:
        return _preload(kind, path, environ)
    if setting != "auto":
        names, package = LIBRARIES[kind]
        raise ValueError(
            f"{ENV_KEY}={setting}: none of {', '.join(names)} found in {', '.join(search_dirs)}; "
            f"install it (apt install {package}) or set {ENV_KEY}=auto"
        )
    return _glibc(environ, "tcmalloc not installed")


def release_free_memory() -> bool:
    """Hand the memory glibc's ``malloc`` keeps after frees back to the system (``malloc_trim(0)``).

    A long-lived server that just finished a burst holds its peak (a batch's KV cache) as free heap otherwise; a
    training worker should not call it (the next step would fault the same pages in again). Returns False where
    there is nothing to call (not glibc, or another allocator preloaded: tcmalloc and jemalloc return memory
    themselves).
    """
    import ctypes
    import ctypes.util

    if _preloaded_allocator(os.environ) is not None:
        return False
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return False
    if trim is None:
        return False
    trim(0)
    return True

