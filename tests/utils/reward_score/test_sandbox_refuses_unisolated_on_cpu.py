"""Issue 21 finding 5: without namespaces the sandbox ran untrusted code unisolated with only a warning.

Now it refuses unless ``HYBRIDRL_SANDBOX_ALLOW_UNISOLATED=1``. "Unavailable" is forced through the probe
itself (a missing or failing ``unshare`` binary, or a ``PATH`` without it), not by faking the runner.
"""

from __future__ import annotations

import json

import pytest

from hybridrl.utils.reward_score.code import compute_score
from hybridrl.utils.reward_score.sandbox import (
    ALLOW_UNISOLATED_ENV,
    SandboxUnavailableError,
    probe_isolation,
    reprobe_isolation,
    run_python,
)


@pytest.fixture
def no_unshare_on_path(tmp_path, monkeypatch):
    """This process's ``PATH`` holds no ``unshare``: the real probe finds isolation unavailable."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert reprobe_isolation() == "none"
    yield
    monkeypatch.undo()
    reprobe_isolation()  # later tests see this machine's real isolation again


def test_probe_reports_why_isolation_is_unavailable(tmp_path):
    assert probe_isolation(None) == ("none", "`unshare` (util-linux) is not installed")
    mechanism, why = probe_isolation("/bin/false")  # an "unshare" that always fails
    assert mechanism == "none" and why.startswith("the kernel refused new namespaces")
    mechanism, why = probe_isolation(str(tmp_path / "missing-unshare"))
    assert mechanism == "none" and "probe failed" in why


def test_unisolated_run_is_refused_and_the_code_never_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(ALLOW_UNISOLATED_ENV, raising=False)
    marker = tmp_path / "ran"
    mechanism, why = probe_isolation(None)
    with pytest.raises(SandboxUnavailableError, match=f"refusing to run it.*{ALLOW_UNISOLATED_ENV}=1"):
        run_python(f"open({str(marker)!r}, 'w').write('x')", mechanism=mechanism)
    assert not marker.exists()


def test_unisolated_run_with_the_opt_in_runs_and_says_so(monkeypatch):
    monkeypatch.setenv(ALLOW_UNISOLATED_ENV, "1")
    result = run_python("print(6 * 7)", mechanism=probe_isolation(None)[0])
    assert result.ok and result.stdout.strip() == "42" and result.isolation == "none"


def test_code_scorer_stops_instead_of_scoring_zero_without_isolation(no_unshare_on_path, monkeypatch):
    monkeypatch.delenv(ALLOW_UNISOLATED_ENV, raising=False)
    tests = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    with pytest.raises(SandboxUnavailableError, match="`unshare` \\(util-linux\\) is not installed"):
        compute_score(program, tests)
    monkeypatch.setenv(ALLOW_UNISOLATED_ENV, "1")
    assert compute_score(program, tests)[0] == 1.0  # the risk accepted: it runs (unisolated) and scores
