"""What this CPU computes natively, read from ``/proc/cpuinfo`` (torch-free: the config checks use it before Ray).

bf16 matmuls are fast on a CPU only with hardware bf16 dot products: x86 ``avx512_bf16`` or AMX (``amx_bf16``),
Arm ``bf16`` (SVE/NEON BFMMLA). Without them torch emulates bf16 and a matmul runs one to two orders of magnitude
slower than fp32 (measured on an AVX2-only AMD EPYC VM: 1.3 vs 78 GFLOP/s for a 512² ``torch.mm`` on one thread).
"""

from __future__ import annotations

import functools
import os

__all__ = ["BF16_FLAGS", "cpu_flags", "has_native_bf16"]

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # x86 AVX-512 BF16, x86 AMX, Arm FEAT_BF16
_CPUINFO = "/proc/cpuinfo"


def parse_cpu_flags(cpuinfo_text: str) -> frozenset[str]:
    """The flags of the first processor in ``/proc/cpuinfo`` text (x86 ``flags``, Arm ``Features``)."""
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str] | None:
    """This machine's CPU flags, or None where ``/proc/cpuinfo`` does not exist (not Linux) or says nothing."""
    if not os.path.isfile(_CPUINFO):
        return None
    with open(_CPUINFO, encoding="utf-8", errors="replace") as handle:
        flags = parse_cpu_flags(handle.read())
    return flags or None


def has_native_bf16(flags: frozenset[str] | None = None) -> bool | None:
    """Whether the CPU has hardware bf16 matmuls; None when unknown (no ``/proc/cpuinfo``)."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return None
    return bool(flags & BF16_FLAGS)
