"""The quickstart's step budget follows the actor's precision: 72 steps in bf16, 48 in fp32 (both ~8 training
minutes on a 2-core CPU), an explicit ``STEPS`` always wins, ``auto`` precision is measured, an explicit one is
not, and ``DRY_RUN=1`` prints the resolved knobs without preparing a model or training."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hybridrl.utils.cpu_features import has_native_bf16
from hybridrl.utils.cpu_precision import BF16_MIN_SPEEDUP

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "run_quickstart.sh"
_KNOBS = ("STEPS", "BATCH", "N", "LR", "TRAIN_DTYPE", "ROLLOUT_DTYPE", "SEED")


def resolved_knobs(tmp_path: Path, with_stdout: bool = False, **env: str):
    """``key=value`` pairs of the script's dry-run line; knobs not in ``env`` take the script's defaults."""
    base = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    proc = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
        env={**base, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path / "out"), "DRY_RUN": "1", **env},
    )
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("[quickstart] steps="))
    assert not (tmp_path / "out" / "checkpoints").exists()  # nothing trained
    knobs = dict(re.findall(r"(\w+)=(\S+)", line))
    return (knobs, proc.stdout) if with_stdout else knobs


@pytest.mark.parametrize(("train_dtype", "steps"), [("bf16", "72"), ("fp32", "48")])
def test_default_steps_follow_the_actor_precision(tmp_path, train_dtype, steps):
    knobs = resolved_knobs(tmp_path, TRAIN_DTYPE=train_dtype, ROLLOUT_DTYPE="float32")
    assert knobs["steps"] == steps
    assert knobs["train_dtype"] == train_dtype and knobs["batch"] == "24" and knobs["n"] == "4"


@pytest.mark.parametrize("train_dtype", ["bf16", "fp32"])
def test_explicit_steps_win(tmp_path, train_dtype):
    assert resolved_knobs(tmp_path, TRAIN_DTYPE=train_dtype, ROLLOUT_DTYPE="float32", STEPS="5")["steps"] == "5"


def test_auto_precision_follows_the_measurement(tmp_path):
    """``auto`` times bf16 and fp32 at SmolLM2's shapes, prints both figures per regime and takes bf16 only where
    it measured clearly faster (the decision itself: tests/utils/test_cpu_precision_on_cpu.py)."""
    knobs, stdout = resolved_knobs(tmp_path, with_stdout=True)
    figures = dict(re.findall(r"\[precision\] (train|decode) .*\(bf16 ([0-9.]+)x\)", stdout))
    assert set(figures) == {"train", "decode"}, stdout
    assert knobs["train_dtype"] == ("bf16" if float(figures["train"]) >= BF16_MIN_SPEEDUP else "fp32")
    assert knobs["rollout_dtype"] == ("bfloat16" if float(figures["decode"]) >= BF16_MIN_SPEEDUP else "float32")
    assert knobs["steps"] == ("72" if knobs["train_dtype"] == "bf16" else "48")
    if has_native_bf16() is False:  # emulated bf16 is an order of magnitude slower: no load can flip that
        assert knobs["train_dtype"] == "fp32" and knobs["rollout_dtype"] == "float32"


def test_an_explicit_precision_is_not_measured(tmp_path):
    knobs, stdout = resolved_knobs(tmp_path, with_stdout=True, TRAIN_DTYPE="bf16", ROLLOUT_DTYPE="float32")
    assert "[precision]" not in stdout
    assert knobs["train_dtype"] == "bf16" and knobs["rollout_dtype"] == "float32"
