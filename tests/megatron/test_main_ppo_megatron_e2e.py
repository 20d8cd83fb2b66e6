"""``python -m hybridrl.trainer.main_ppo --config-name ppo_megatron_trainer`` end to end on CPU (.venv-megatron).

Real Ray, 2 Megatron workers over gloo, the hf rollout synced from the Megatron actor (HF tensors gathered over TP),
the tiny GQA Qwen2 (4 query / 2 KV heads), 2 steps:

    GRPO   TP=2 (one data-parallel rank: both TP ranks get the same slice), the reference inside the policy worker
    PPO    TP=1, DP=2, with the Megatron critic (critic.strategy=megatron) colocated with the actor
"""

from __future__ import annotations

import math

import pytest

from tests.trainer.conftest import arithmetic_data_dir  # noqa: F401 - the fixture, shared with the FSDP e2e tests
from tests.trainer.e2e import failure_report, grpo_args, ppo_overrides, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow

MEGATRON_CONFIG = ["--config-name", "ppo_megatron_trainer"]


def megatron_grpo_args(model_dir: str, data_dir: str, ckpt_dir: str, tp_size: int, **overrides: object) -> list[str]:
    """The FSDP e2e tests' GRPO run (tests/trainer/e2e.py) on the Megatron config: TP ``tp_size`` on 2 ranks,
    validation before training and at step 2, no checkpoint."""
    megatron = {
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": tp_size,
        "trainer.save_freq": -1,
        **overrides,
    }
    return [*MEGATRON_CONFIG, *grpo_args(model_dir, data_dir, ckpt_dir, **megatron)]


def _finite(metrics: dict[str, float], name: str) -> float:
    value = metrics[name]
    assert math.isfinite(value), f"{name}={value}"
    return value


def test_grpo_megatron_tp2_end_to_end(tiny_gqa_qwen2_dir, arithmetic_data_dir, tmp_path):  # noqa: F811
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    proc = run_main_ppo(megatron_grpo_args(tiny_gqa_qwen2_dir, arithmetic_data_dir, ckpt, tp_size=2), metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    # the driver's plan counts data-parallel ranks: 2 ranks / TP 2 = dp 1, so a rank's mini-batch is 4 x 4 = 16 samples
    assert "world 2 / TP·PP·CP 2" in proc.stdout, proc.stdout[-3000:]
    assert "[trainer] global_pool: actor_rollout_ref on 2 rank(s)" in proc.stdout  # the reference in the policy worker
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == [0, 1, 2]  # step 0 = validation before training
    for step in (0, 2):
        assert 0.0 <= _finite(metrics[step], "val-core/arithmetic/reward/mean@1") <= 1.0
    for step in (1, 2):
        for name in ("actor/pg_loss", "actor/entropy", "critic/score/mean", "actor/pg_clipfrac"):
            _finite(metrics[step], name)
        assert _finite(metrics[step], "actor/grad_norm") > 0
    # step 1 generates with the weights synced for the validation at step 0; step 2 after step 1's update: the hf
    # rollout received the Megatron actor's 26 HF tensors (gathered over TP) and verified a sample of them
    assert metrics[2]["rollout/weight_sync_tensors"] == 26 and metrics[2]["rollout/weight_sync_verified_tensors"] > 0
    # step 1's update moved the actor away from the (frozen) reference: step 2's KL loss is positive
    assert _finite(metrics[2], "actor/kl_loss") > 0
    assert metrics[2]["training/global_step"] == 2
    assert "critic/vf_loss" not in metrics[2]  # GRPO has no critic


def test_ppo_megatron_critic_dp2_end_to_end(tiny_gqa_qwen2_dir, arithmetic_data_dir, tmp_path):  # noqa: F811
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    ppo = {**ppo_overrides(tiny_gqa_qwen2_dir), "trainer.test_freq": -1, "trainer.val_before_train": False}
    args = megatron_grpo_args(tiny_gqa_qwen2_dir, arithmetic_data_dir, ckpt, tp_size=1, **ppo)
    proc = run_main_ppo(args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    assert "world 2 / TP·PP·CP 1" in proc.stdout  # dp 2: 8 samples per step, 4 per rank
    assert "[trainer] global_pool: actor_rollout_ref, critic on 2 rank(s)" in proc.stdout, proc.stdout[-3000:]
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == [1, 2]
    for step in (1, 2):
        for name in ("critic/vf_loss", "critic/values/mean", "critic/vf_explained_var", "critic/returns/mean",
                     "actor/pg_loss", "actor/reward_kl_penalty"):
            _finite(metrics[step], name)
        assert _finite(metrics[step], "critic/grad_norm") > 0 and _finite(metrics[step], "actor/grad_norm") > 0
    # KL in the reward: at step 1 the actor is still the reference (the same weights on the same layout), at step 2
    # step 1's update has moved it
    assert abs(metrics[1]["actor/reward_kl_penalty"]) < 1e-6 < abs(metrics[2]["actor/reward_kl_penalty"])
