"""Supervisor run inside the sandbox namespaces (not imported by hybridrl; executed as a script).

argv[1] is a JSON object: ``workdir``, ``python``, ``script``, ``limits`` (rlimit name → value),
``readonly_fs`` (make every mount read-only except ``workdir``), ``drop_to_uid`` (int or null).

It stays alive as the namespace's PID 1 and runs the untrusted program as its child, so that
(a) rlimit signals reach an ordinary process (PID 1 ignores default-action signals), and
(b) when the supervisor exits, the kernel kills every process left in the PID namespace.
Exit status: the child's exit code, or 128 + signal number when a signal killed it.
"""

import ctypes
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 21
_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}


def _mount(libc, source, target, flags):
    if libc.mount(source, target.encode(), None, flags, None) != 0:
        return os.strerror(ctypes.get_errno())
    return None


def make_filesystem_readonly(workdir):
    """Bind ``workdir`` onto itself, then remount every other mount read-only. Returns failures."""
    libc = ctypes.CDLL(None, use_errno=True)
    failures = []
    err = _mount(libc, workdir.encode(), workdir, MS_BIND | MS_REC)
    if err:
        return [f"{workdir}: {err}"]
    with open("/proc/self/mounts") as f:
        entries = [line.split() for line in f]
    for entry in entries:
        target = entry[1].encode().decode("unicode_escape")
        if target == workdir:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in entry[3].split(","):
            flags |= _OPTION_FLAGS.get(opt, 0)
        err = _mount(libc, None, target, flags)
        if err:
            failures.append(f"{target}: {err}")
    return failures


def run_child(cfg):
    os.chdir(cfg["workdir"])
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if cfg["drop_to_uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["drop_to_uid"])
        os.setuid(cfg["drop_to_uid"])
    env = cfg["env"]
    os.execve(cfg["python"], [cfg["python"], "-I", "-B", cfg["script"]], env)


def main():
    cfg = json.loads(sys.argv[1])
    if cfg["readonly_fs"]:
        failures = make_filesystem_readonly(cfg["workdir"])
        with open(os.path.join(cfg["workdir"], ".sandbox_report.json"), "w") as f:
            json.dump({"readonly_failures": failures}, f)
    pid = os.fork()
    if pid == 0:
        try:
            run_child(cfg)
        except BaseException as exc:  # report why the program could not start, then never return
            os.write(2, f"[sandbox] could not start the program: {type(exc).__name__}: {exc}\n".encode())
        os._exit(126)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
