"""Code scorer and sandbox: pass rate, and hostile programs (loops, memory/fork bombs, env, files, sockets).

What is enforced (see hybridrl/utils/reward_score/sandbox.py): rlimits, a throw-away work dir, a
scrubbed env and a kill of the whole process tree always; with isolation "netns" also no network,
a read-only filesystem outside the work dir and a private /proc. Each test says which mechanism ran.
"""

import json
import os
import subprocess
import time

import pytest

from hybridrl.utils.reward_score import default_compute_score
from hybridrl.utils.reward_score.code import compute_score
from hybridrl.utils.reward_score.sandbox import SandboxLimits, isolation, run_python

pytestmark = pytest.mark.slow  # spawns many short processes

ECHO_SUM = {"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7\n", "0\n"]}
FAST = SandboxLimits(cpu_time_s=2, wall_time_s=4.0, memory_mb=512)


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\nDone."


def test_isolation_mechanism_is_reported():
    mechanism = isolation()
    assert mechanism in ("netns", "none")
    print(f"code sandbox isolation on this machine: {mechanism}")
    assert run_python("print(1)").isolation == mechanism


def test_netns_is_used_whenever_the_kernel_allows_user_and_net_namespaces():
    """Independent probe (plain ``unshare`` of user + net namespaces): if it works, the sandbox must not fall back."""
    prefix = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--net"]
    try:
        allowed = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        allowed = False
    print(f"user+net namespaces allowed: {allowed}; sandbox isolation: {isolation()}")
    if not allowed:
        pytest.skip("this kernel refuses user+net namespaces: the sandbox refuses code there unless HYBRIDRL_SANDBOX_ALLOW_UNISOLATED=1")
    assert isolation() == "netns"


def test_passing_program_scores_one():
    score, meta = compute_score(fenced("a, b = map(int, input().split())\nprint(a + b)"), json.dumps(ECHO_SUM))
    assert score == 1.0 and all(m["passed"] for m in meta)


def test_partially_failing_program_scores_pass_rate():
    # prints a - b: "1 2"→-1 ✗, "10 -3"→13 ✗, "0 0"→0 ✓  → 1/3
    score, _ = compute_score(fenced("a, b = map(int, input().split())\nprint(a - b)"), ECHO_SUM)
    assert score == pytest.approx(1 / 3)


def test_call_based_cases():
    tests = {"fn_name": "add", "inputs": [[1, 2], [5, 5]], "outputs": [[3], [10]]}  # APPS wraps outputs
    assert compute_score(fenced("def add(a, b):\n    return a + b"), tests)[0] == 1.0
    cls = "class Solution:\n    def add(self, a, b):\n        return a * b"
    assert compute_score(fenced(cls), tests)[0] == 0.0  # 1*2≠3, 5*5≠10


def test_default_compute_score_code_sources():
    program = fenced("print(int(input()) * 2)")
    truth = json.dumps({"inputs": ["4\n"], "outputs": ["8\n"]})
    for source in ("codecontests", "apps", "codeforces", "taco"):
        assert default_compute_score(source, program, truth) == 1.0


def test_infinite_loop_is_killed_and_scores_zero():
    start = time.monotonic()
    score, _ = compute_score(fenced("while True:\n    pass"), {"inputs": ["\n"], "outputs": ["x\n"]}, limits=FAST)
    assert score == 0.0
    assert time.monotonic() - start < 10  # CPU limit 2 s, wall limit 4 s


def test_sleeping_program_hits_wall_timeout():
    result = run_python("import time\ntime.sleep(60)", limits=FAST)
    assert result.timed_out and result.returncode is None


def test_memory_bomb_fails_cleanly():
    result = run_python("x = bytearray(8 * 1024**3)\nprint('allocated')", limits=FAST)
    assert not result.ok and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


def test_fork_bomb_is_contained():
    start = time.monotonic()
    result = run_python("import os\nwhile True:\n    os.fork()", limits=SandboxLimits(cpu_time_s=2, wall_time_s=5.0))
    assert not result.ok
    assert time.monotonic() - start < 15
    assert "Resource temporarily unavailable" in result.stderr or result.timed_out


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("HYBRIDRL_FAKE_SECRET", "hunter2")
    result = run_python("import os, json\nprint(json.dumps(dict(os.environ)))")
    env = json.loads(result.stdout)
    assert "HYBRIDRL_FAKE_SECRET" not in env and "hunter2" not in result.stdout
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_CTYPE"}


def test_parent_environment_not_readable_via_proc(monkeypatch):
    monkeypatch.setenv("HYBRIDRL_FAKE_SECRET", "hunter2")
    code = f"try:\n    print(open('/proc/{os.getpid()}/environ', 'rb').read())\nexcept Exception as e:\n    print('denied', e)"
    result = run_python(code)
    if isolation() == "netns":  # private /proc: the trainer's pid does not exist there
        assert "hunter2" not in result.stdout
    else:  # only the uid drop (when root) protects it; nothing to assert otherwise
        pytest.skip("no namespaces: /proc of the parent may be readable")


def test_write_outside_workdir(tmp_path):
    target = tmp_path / "escaped.txt"
    result = run_python(f"open({str(target)!r}, 'w').write('pwned')\nprint('wrote')")
    if isolation() == "netns":  # read-only filesystem outside the work dir
        assert not target.exists() and "wrote" not in result.stdout
        assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr
    elif os.geteuid() == 0:  # dropped to uid 65534, which cannot write root's tmp dir
        assert not target.exists()
    else:
        pytest.skip("no namespaces and not root: writes are limited only by the user's own permissions")


def test_writes_inside_workdir_are_allowed_and_discarded():
    result = run_python("open('scratch.txt', 'w').write('ok')\nimport os\nprint(os.getcwd())")
    assert result.ok
    assert not os.path.exists(result.stdout.strip())  # the work dir is deleted after the run


def test_socket_connect(tmp_path):
    code = (
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('connected')\n"
        "except OSError as e:\n    print('blocked', e.errno)"
    )
    result = run_python(code)
    print(f"socket test: isolation mechanism = {result.isolation}, child said {result.stdout.strip()!r}")
    assert result.isolation == isolation()
    if isolation() == "netns":
        assert result.stdout.startswith("blocked"), result.stdout  # no route: only a down loopback exists
    else:
        assert "connected" in result.stdout or "blocked" in result.stdout  # no isolation: whatever the host allows


def test_output_flood_is_capped():
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", limits=FAST)
    assert not result.ok
    assert len(result.stdout) <= FAST.max_output_chars


def test_garbage_test_cases_score_zero():
    assert compute_score("print(1)", "{not json")[0] == 0.0
