"""The quickstart's step budget follows the actor's precision: 72 steps in bf16, 48 in fp32 (both ~8 training
minutes on a 2-core CPU), an explicit ``STEPS`` always wins, and ``DRY_RUN=1`` prints the resolved knobs without
preparing a model or training."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hybridrl.utils.cpu_features import has_native_bf16

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "run_quickstart.sh"
_KNOBS = ("STEPS", "BATCH", "N", "LR", "TRAIN_DTYPE", "ROLLOUT_DTYPE", "SEED")


def resolved_knobs(tmp_path: Path, **env: str) -> dict[str, str]:
    """``key=value`` pairs of the script's dry-run line; knobs not in ``env`` take the script's defaults."""
    base = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    proc = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
        env={**base, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path / "out"), "DRY_RUN": "1", **env},
    )
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("[quickstart] steps="))
    assert not (tmp_path / "out" / "checkpoints").exists()  # nothing trained
    return dict(re.findall(r"(\w+)=(\S+)", line))


@pytest.mark.parametrize(("train_dtype", "steps"), [("bf16", "72"), ("fp32", "48")])
def test_default_steps_follow_the_actor_precision(tmp_path, train_dtype, steps):
    knobs = resolved_knobs(tmp_path, TRAIN_DTYPE=train_dtype, ROLLOUT_DTYPE="float32")
    assert knobs["steps"] == steps
    assert knobs["train_dtype"] == train_dtype and knobs["batch"] == "24" and knobs["n"] == "4"


@pytest.mark.parametrize("train_dtype", ["bf16", "fp32"])
def test_explicit_steps_win(tmp_path, train_dtype):
    assert resolved_knobs(tmp_path, TRAIN_DTYPE=train_dtype, ROLLOUT_DTYPE="float32", STEPS="5")["steps"] == "5"


def test_auto_precision_picks_bf16_only_with_bf16_units(tmp_path):
    knobs = resolved_knobs(tmp_path)
    native = has_native_bf16() is not False
    assert knobs["train_dtype"] == ("bf16" if native else "fp32")
    assert knobs["rollout_dtype"] == ("bfloat16" if native else "float32")
    assert knobs["steps"] == ("72" if native else "48")
