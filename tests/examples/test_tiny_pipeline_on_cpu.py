"""The tiny SFT → GRPO path end to end (CI): tiny random model, SFT warm start, GRPO raises accuracy."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "tiny_pipeline" / "tiny_pipeline.py"
# Measured with the defaults (examples/tiny_pipeline/README.md): seed 1 0.230 -> 0.438 (+0.21), seed 2
# 0.297 -> 0.398 (+0.10); the validation estimate has a std of ~0.03 (256 answers). Seed 1 must gain 0.1.
MIN_GAIN = 0.1


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
def test_sft_warm_start_then_grpo_improves_validation_accuracy(tmp_path):
    pipeline = _load_pipeline()
    summary = pipeline.run_pipeline(pipeline.parse_args(["--work_dir", str(tmp_path), "--seed", "1"]))
    before, after = summary["val_accuracy_before_grpo"], summary["val_accuracy_after_grpo"]
    print(json.dumps(summary, indent=2))
    assert 0.15 <= before <= 0.7, f"the SFT warm start should leave partial accuracy: {summary}"
    assert after >= before + MIN_GAIN, json.dumps(summary, indent=2)
    assert (tmp_path / "summary.json").is_file()
