"""ReMax learns from an SFT-warmed tiny model (examples/tiny_pipeline, seed 1, ``--adv_estimator remax``).

On the random tiny model with the digit-share reward ReMax's greedy baseline flips between all-digit answers
(reward ≈ 1) and digit-free ones (0), so the sampled reward does not move (hybridrl/recipes/remax/README.md).
After the pipeline's SFT warm start the greedy answer is right on some prompts and wrong on others, the baseline differs
per prompt, and the sampled accuracy rises. Measured (seed 1, 25 steps, lr 6e-4): 0.230 → 0.414 held-out sampled
accuracy, training score 0.263 → 0.430 (steps 1–3 → 23–25); GRPO on the same path: 0.230 → 0.438.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.trainer.e2e import read_metrics

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "tiny_pipeline" / "tiny_pipeline.py"
MIN_GAIN = 0.1


def test_remax_raises_accuracy_from_the_sft_warm_start(tmp_path):
    spec = importlib.util.spec_from_file_location("tiny_pipeline_remax", SCRIPT)
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    args = pipeline.parse_args(["--work_dir", str(tmp_path), "--seed", "1", "--adv_estimator", "remax"])
    summary = pipeline.run_pipeline(args)
    before, after = summary["val_accuracy_before_grpo"], summary["val_accuracy_after_grpo"]
    assert after >= before + MIN_GAIN, json.dumps(summary, indent=2)
    metrics = read_metrics(str(tmp_path / "grpo_metrics.jsonl"))
    steps = [metrics[s] for s in sorted(metrics) if s >= 1]
    assert len(steps) == args.grpo_steps
    assert all("timing_s/gen_max" in s for s in steps)  # the greedy baseline generation ran every step
    scores = [s["critic/score/mean"] for s in steps]
    assert sum(scores[-3:]) / 3 >= sum(scores[:3]) / 3 + MIN_GAIN, scores
