"""Online DPO and SPIN end to end through their CLIs on CPU: real Ray, 2 FSDP2 workers over gloo, hf rollout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.recipes.dpo_e2e import ASSETS, dpo_args, run_recipe
from tests.trainer.e2e import failure_report, read_metrics

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DPO_METRICS = [
    "actor/dpo_loss",
    "actor/rewards_chosen",
    "actor/rewards_rejected",
    "actor/reward_accuracy",
    "actor/reward_margin",
    "actor/dpo_logits",
    "actor/grad_norm",
    "actor/lr",
    "dpo/num_pairs",
    "dpo/pair_ratio",
    "critic/score/mean",
    "response_length/mean",
    "timing_s/gen",
    "timing_s/ref",
    "timing_s/update_actor",
    "timing_s/step",
    "perf/throughput",
    "training/global_step",
]
# A forward of the policy and of the reference on the same rows with the same weights agree to float32
# rounding (different micro-batch shapes): far below what one optimizer step moves.
SAME_WEIGHTS_TOL = 1e-4


@pytest.fixture(scope="module")
def spin_data_dir(tmp_path_factory) -> str:
    """16 train / 8 test one-digit additions; ``extra_info.response`` = the answer (SPIN's SFT target)."""
    plain, spin = tmp_path_factory.mktemp("arithmetic"), tmp_path_factory.mktemp("arithmetic_spin")
    subprocess.run(
        [
            sys.executable,
            str(REPO / "examples/data_preprocess/arithmetic.py"),
            "--local_dir",
            str(plain),
            "--train_size",
            "16",
            "--test_size",
            "8",
            "--digits",
            "1",
            "--operators",
            "+",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            sys.executable,
            str(REPO / "hybridrl/recipes/spin/add_sft_response.py"),
            "--input",
            str(plain),
            "--output",
            str(spin),
            "--source",
            "reward_model.ground_truth",
        ],
        check=True,
        capture_output=True,
    )
    return str(spin)


def test_online_dpo_end_to_end(tiny_model_dir, spin_data_dir, tmp_path):
    """IPO loss, validation and a checkpoint at step 2; step 1's implicit rewards are 0 (policy == reference)."""
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = dpo_args(
        tiny_model_dir,
        spin_data_dir,
        ckpt,
        **{
            "custom_reward_function.path": ASSETS / "dpo_digit_reward.py",
            "algorithm.dpo.loss_type": "ipo",
            "trainer.test_freq": 2,
            "trainer.save_freq": 2,
        },
    )
    proc = run_recipe("hybridrl.recipes.online_dpo.main_online_dpo", args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == [1, 2]
    for name in DPO_METRICS:
        assert name in metrics[1], name
    assert "val-core/arithmetic/reward/mean@1" in metrics[2]
    assert 0 < metrics[1]["dpo/num_pairs"] <= 8  # at most one pair per prompt
    assert abs(metrics[1]["actor/rewards_chosen"]) < SAME_WEIGHTS_TOL
    assert abs(metrics[1]["actor/reward_margin"]) < SAME_WEIGHTS_TOL
    # IPO at h = 0: (0 − 1/(2·0.1))² = 25
    assert metrics[1]["actor/dpo_loss"] == pytest.approx(25.0, abs=1e-2)
    assert metrics[1]["actor/grad_norm"] > 0 and metrics[2]["actor/dpo_loss"] != metrics[1]["actor/dpo_loss"]
    step_dir = os.path.join(ckpt, "global_step_2", "actor")
    assert {"model_world_size_2_rank_0.pt", "optim_world_size_2_rank_1.pt"} <= set(os.listdir(step_dir))


def test_spin_end_to_end_learns_and_refreshes_the_opponent(tiny_model_dir, spin_data_dir, tmp_path):
    """7 SPIN steps with ref_update_freq=5. The reference equals the actor at step 1 (initial model) and at
    step 6 (synced after step 5), so the implicit rewards there are 0. In between the preference for the SFT
    target grows: measured reward accuracy 0.94, 0.88, 1.0, 1.0 and margin 0.054 → 0.108 over steps 2–5."""
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = dpo_args(
        tiny_model_dir,
        spin_data_dir,
        ckpt,
        **{
            "actor_rollout_ref.rollout.n": 2,
            "trainer.total_epochs": 10,
            "trainer.total_training_steps": 7,
            "trainer.ref_update_freq": 5,
        },
    )
    proc = run_recipe("hybridrl.recipes.spin.main_spin", args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == list(range(1, 8))
    for name in [*DPO_METRICS, "spin/identical_ratio", "spin/target_clip_ratio"]:
        assert name in metrics[2], name
    assert "timing_s/update_ref" in metrics[5] and "timing_s/update_ref" not in metrics[4]
    assert metrics[1]["dpo/num_pairs"] >= 14  # 8 prompts × 2 generations; a random model rarely says "N<eos>"
    assert metrics[1]["spin/target_clip_ratio"] == 0.0  # "N" + EOS fits 8 tokens
    for step in (1, 6):
        assert abs(metrics[step]["actor/rewards_chosen"]) < SAME_WEIGHTS_TOL, (step, metrics[step])
    assert metrics[2]["actor/rewards_chosen"] > 10 * SAME_WEIGHTS_TOL  # the target got likelier than under ref
    assert _mean(metrics, "actor/reward_accuracy", range(3, 6)) >= 0.8
    assert metrics[5]["actor/reward_margin"] > metrics[2]["actor/reward_margin"] + 0.025


def _mean(metrics: dict[int, dict[str, float]], name: str, steps: range) -> float:
    return sum(metrics[step][name] for step in steps) / len(steps)
