"""Run untrusted Python (model-generated code) in a separate, limited, throw-away process.

Every run gets:
- a fresh temporary working directory, deleted afterwards;
- a scrubbed environment (``PATH``, ``HOME``/``TMPDIR`` = the work dir, ``LANG``; nothing inherited);
- ``resource`` rlimits: CPU seconds, address space, process count, file size, open files, no core files;
- a wall-clock timeout, after which the whole process tree is killed; stdout/stderr go to files
  capped by the file-size limit, so an output flood cannot exhaust the trainer's memory.

Isolation mechanism, detected once per process (:func:`isolation`):
- ``"netns"``: ``unshare`` new network + mount + PID namespaces (plus a user namespace when not root).
  No network (only a down loopback device), the whole filesystem is remounted read-only except the
  work dir, ``/proc`` is private (host processes and their environments are invisible), and when the
  supervisor exits every process left in the PID namespace dies (fork bombs cannot linger).
- ``"none"``: ``unshare`` is missing or refused by the kernel. Untrusted code is then REFUSED
  (:class:`SandboxUnavailableError`, naming the reason and the fix) unless the user accepts the risk with
  env ``HYBRIDRL_SANDBOX_ALLOW_UNISOLATED=1``: then the rlimits, work dir, scrubbed env and process-group
  kill still apply, but the network is reachable and the program can write wherever the running user
  can (a warning is logged once).
When running as root, the program additionally drops to uid/gid 65534 (``nobody``): the process-count
limit is not enforced for root, and ``nobody`` cannot write root-owned files even without namespaces.

Reading world-readable files is not prevented in either mode.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_child.py")
_NOBODY = 65534
# Set to 1 to run untrusted code without namespace isolation when the kernel refuses namespaces.
ALLOW_UNISOLATED_ENV = "HYBRIDRL_SANDBOX_ALLOW_UNISOLATED"


class SandboxUnavailableError(RuntimeError):
    """Isolation is unavailable on this machine and the user did not accept running code without it."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Memory is the address-space limit (RLIMIT_AS) of the program."""

    cpu_time_s: int = 5
    wall_time_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 16
    max_file_size_mb: int = 16
    max_open_files: int = 64
    max_output_chars: int = 1_000_000


@dataclass
class SandboxResult:
    """Outcome of one run. ``returncode`` > 128 means killed by signal ``returncode - 128``."""

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    isolation: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _namespace_prefix() -> list[str]:
    base = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if os.geteuid() != 0:
        base[1:1] = ["--user", "--map-root-user"]
    return base


def probe_isolation(unshare: str | None) -> tuple[str, str]:
    """``("netns", "")`` if ``unshare`` (a path; None: not installed) creates the namespaces, else ``("none", why)``."""
    if unshare is None:
        return "none", "`unshare` (util-linux) is not installed"
    try:
        probe = subprocess.run([unshare, *_namespace_prefix()[1:], "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "none", f"the unshare probe failed ({exc})"
    if probe.returncode != 0:
        return "none", f"the kernel refused new namespaces ({probe.stderr.decode(errors='replace').strip()})"
    return "netns", ""


@functools.lru_cache(maxsize=1)
def _probe_once() -> tuple[str, str]:
    mechanism, why = probe_isolation(shutil.which("unshare"))
    if mechanism == "netns":
        logger.info("code sandbox: isolation=netns (user/net/mount/pid namespaces, read-only filesystem)")
    return mechanism, why


def isolation() -> str:
    """``"netns"`` if namespaced runs work on this machine, else ``"none"`` (probed once per process)."""
    return _probe_once()[0]


def reprobe_isolation() -> str:
    """Forget the cached probe (e.g. after ``PATH`` or the kernel settings changed) and probe again."""
    _probe_once.cache_clear()
    return isolation()


def unisolated_allowed() -> bool:
    """True if the user set ``HYBRIDRL_SANDBOX_ALLOW_UNISOLATED=1`` (accepts running code without namespaces)."""
    return os.environ.get(ALLOW_UNISOLATED_ENV, "").strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def _warn_unisolated(why: str) -> None:
    logger.warning("code sandbox: %s; running untrusted code WITHOUT network/filesystem isolation because %s=1",
                   why, ALLOW_UNISOLATED_ENV)


def check_isolation(mechanism: str, why: str = "") -> None:
    """Raise :class:`SandboxUnavailableError` for ``mechanism == "none"`` unless the user accepted the risk."""
    if mechanism != "none":
        return
    why = why or "namespace isolation is unavailable"
    if unisolated_allowed():
        _warn_unisolated(why)
        return
    raise SandboxUnavailableError(
        f"code sandbox: {why}, so model-generated code cannot be isolated (it could open network connections "
        "and write files as the training user); refusing to run it. Fix: allow unprivileged user namespaces "
        "(e.g. sysctl kernel.unprivileged_userns_clone=1 or kernel.apparmor_restrict_unprivileged_userns=0, or "
        f"a container started with namespace support), or accept the risk with {ALLOW_UNISOLATED_ENV}=1"
    )


def _rlimits(limits: SandboxLimits, drop_to_uid: int | None, mechanism: str) -> dict[str, int]:
    nproc = limits.max_processes
    if mechanism == "none" and drop_to_uid is None:
        # Outside a user namespace RLIMIT_NPROC counts every process of this uid.
        nproc += sum(1 for p in os.listdir("/proc") if p.isdigit())
    mb = 1024 * 1024
    return {
        "RLIMIT_CPU": limits.cpu_time_s,
        "RLIMIT_AS": limits.memory_mb * mb,
        "RLIMIT_NPROC": nproc,
        "RLIMIT_FSIZE": limits.max_file_size_mb * mb,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
    }


def _world_executable(path: str) -> bool:
    """True if a user with no special rights can run ``path`` (every parent dir traversable)."""
    path = os.path.realpath(path)
    parts = [path] + [p for p in _parents(path)]
    return all(os.path.exists(p) and os.stat(p).st_mode & 0o001 for p in parts)


def _parents(path: str):
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        yield path


@functools.lru_cache(maxsize=1)
def program_python(drop_privileges: bool) -> str:
    """Interpreter for the program: this one, or (when dropping to ``nobody``) one ``nobody`` can run."""
    if not drop_privileges:
        return sys.executable
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3", "/usr/local/bin/python3"]
    for candidate in filter(None, candidates):
        if _world_executable(candidate):
            return os.path.realpath(candidate)
    raise RuntimeError(
        "code sandbox: running as root, the program drops to uid 65534, but no Python interpreter is "
        f"reachable for that user (tried {candidates}); install a system python3 or run as a normal user"
    )


def _read_capped(path: str, max_chars: int) -> str:
    with open(path, "rb") as f:
        return f.read(max_chars).decode("utf-8", errors="replace")


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_python(source: str, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
               mechanism: str | None = None) -> SandboxResult:
    """Run ``source`` as a Python script with ``stdin``; never raises for anything the program does.

    Args:
        mechanism: ``"netns"`` or ``"none"`` (default: :func:`isolation`, probed once).

    Raises:
        SandboxUnavailableError: ``mechanism`` is ``"none"`` and ``HYBRIDRL_SANDBOX_ALLOW_UNISOLATED`` is unset.
    """
    if mechanism is None:
        mechanism, why = _probe_once()
        check_isolation(mechanism, why)
    else:
        check_isolation(mechanism)
    drop_to_uid = _NOBODY if os.geteuid() == 0 else None
    workdir = tempfile.mkdtemp(prefix="hybridrl_sbx_")
    try:
        with open(os.path.join(workdir, "solution.py"), "w") as f:
            f.write(source)
        if drop_to_uid is not None:
            os.chown(workdir, drop_to_uid, drop_to_uid)
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        cfg = {
            "workdir": workdir,
            "python": program_python(drop_to_uid is not None),
            "script": "solution.py",
            "limits": _rlimits(limits, drop_to_uid, mechanism),
            "readonly_fs": mechanism == "netns",
            "drop_to_uid": drop_to_uid,
            "env": env,
        }
        prefix = _namespace_prefix() if mechanism == "netns" else []
        cmd = [*prefix, sys.executable, "-I", "-B", _CHILD, json.dumps(cfg)]
        return _execute(cmd, stdin, workdir, env, limits, mechanism)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _execute(cmd, stdin, workdir, env, limits, mechanism) -> SandboxResult:
    out_path, err_path = os.path.join(workdir, ".stdout"), os.path.join(workdir, ".stderr")
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err, tempfile.TemporaryFile() as inp:
        inp.write(stdin.encode())
        inp.seek(0)
        proc = subprocess.Popen(cmd, stdin=inp, stdout=out, stderr=err, cwd=workdir, env=env, start_new_session=True)
        try:
            proc.wait(timeout=limits.wall_time_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_tree(proc)  # also reaps stragglers of a finished run in the "none" mode
    return SandboxResult(
        stdout=_read_capped(out_path, limits.max_output_chars),
        stderr=_read_capped(err_path, limits.max_output_chars),
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        isolation=mechanism,
    )
