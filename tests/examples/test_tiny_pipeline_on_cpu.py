"""The tiny SFT → GRPO path end to end (CI smoke): tiny random model, a short SFT warm start, 2 GRPO steps from its
HF export, validation before and after.

Whether the path learns (seed 1: the 150-step SFT leaves 0.15–0.7 accuracy, 25 GRPO steps add ≥ 0.1; with
``--adv_estimator remax`` the same) is measured by ``python scripts/bench/bench_learning.py --runs tiny_pipeline``.
ReMax's greedy baseline is checked in CI by tests/recipes/remax/test_remax_e2e_on_cpu.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.trainer.e2e import read_metrics

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "tiny_pipeline" / "tiny_pipeline.py"
# The smoke's sizes: enough SFT steps to export a checkpoint, enough RL steps for an update after a first one.
SMOKE_SFT_STEPS = 4
SMOKE_RL_STEPS = 2


def _load_pipeline():
    spec = importlib.util.spec_from_file_location("tiny_pipeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_data_stages_write_rl_and_sft_parquet(tmp_path):
    pipeline = _load_pipeline()
    args = pipeline.parse_args(["--work_dir", str(tmp_path), "--train_size", "80", "--rl_problems", "16"])
    data_dir = pipeline.write_data(tmp_path, args)
    sft = pq.read_table(data_dir / "sft_train.parquet").to_pylist()
    rl = pq.read_table(data_dir / "train.parquet").to_pylist()
    assert len(sft) == len(rl) == 80
    assert pq.read_table(data_dir / "rl_train.parquet").num_rows == 16
    # the SFT pair is the RL prompt's question and its ground truth: "What is a + b? ..." -> "a+b"
    first = sft[0]["question"].split()
    assert int(sft[0]["answer"]) == int(first[2]) + int(first[4].rstrip("?"))
    assert sft[0]["question"] == rl[0]["prompt"][0]["content"]


@pytest.mark.slow
def test_sft_warm_start_then_grpo_steps_run_and_validate_before_and_after(tmp_path):
    pipeline = _load_pipeline()
    argv = ["--work_dir", str(tmp_path), "--seed", "1", "--sft_steps", str(SMOKE_SFT_STEPS)]
    summary = pipeline.run_pipeline(pipeline.parse_args([*argv, "--grpo_steps", str(SMOKE_RL_STEPS)]))
    print(json.dumps(summary, indent=2))
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (Path(summary["sft_model"]) / "config.json").is_file()  # the SFT export is a plain HF folder
    for name in ("val_accuracy_before_grpo", "val_accuracy_after_grpo"):
        assert 0.0 <= summary[name] <= 1.0, summary
    steps = [row for step, row in sorted(read_metrics(str(tmp_path / "grpo_metrics.jsonl")).items()) if step >= 1]
    assert len(steps) == SMOKE_RL_STEPS
    for step in steps:
        for name in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "critic/advantages/mean"):
            assert math.isfinite(step[name]), (name, step)
