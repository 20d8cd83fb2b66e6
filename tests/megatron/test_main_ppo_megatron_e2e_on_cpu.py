"""``python -m hybridrl.trainer.main_ppo --config-name ppo_megatron_trainer`` end to end on CPU (.venv-megatron).

Real Ray, 2 Megatron workers over gloo, the hf rollout synced from the Megatron actor (HF tensors gathered over TP),
the tiny GQA Qwen2 (4 query / 2 KV heads), 2 steps:

    GRPO   TP=2 (one data-parallel rank: both TP ranks get the same slice), the reference inside the policy worker;
           a checkpoint per step, resume from step 1 (step 2 reproduced), model_merger --backend megatron
    PPO    TP=1, DP=2, with the Megatron critic (critic.strategy=megatron) colocated with the actor; checkpoint of
           both at step 2. The same run is the baseline of the dist-checkpoint run: its step 1 again with the actor,
           the reference and the critic trunk loaded from a megatron-core dist checkpoint (the same weights).
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
    validation before training and at step 2, no checkpoint unless ``overrides`` set trainer.save_freq."""
    megatron = {
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": tp_size,
        # verl 0.5's Megatron defaults these runs were written against (verl 0.9: mbridge for the actor, reference
        # and critic, vLLM chunked prefill on, the critic's learning rate constant)
        "actor_rollout_ref.actor.megatron.use_mbridge": False,
        "critic.megatron.use_mbridge": False,
        "critic.optim.lr_decay_style": "linear",
        "actor_rollout_ref.rollout.enable_chunked_prefill": False,
        "trainer.save_freq": -1,
        **overrides,
    }
    return [*MEGATRON_CONFIG, *grpo_args(model_dir, data_dir, ckpt_dir, **megatron)]


def _finite(metrics: dict[str, float], name: str) -> float:
    value = metrics[name]
    assert math.isfinite(value), f"{name}={value}"
    return value


def test_grpo_megatron_tp2_checkpoint_resume_and_merge(tiny_gqa_qwen2_dir, arithmetic_data_dir, tmp_path):  # noqa: F811
    """Run A: 2 steps, validation at steps 0 and 2, a checkpoint after each step. Run B: resume from step 1's
    checkpoint and train step 2 again: its metrics equal run A's step 2. Then step 2's actor merges to an HF folder."""
    ckpt, metrics_a = str(tmp_path / "ckpt"), str(tmp_path / "a.jsonl")
    proc = run_main_ppo(megatron_grpo_args(tiny_gqa_qwen2_dir, arithmetic_data_dir, ckpt, tp_size=2,
                                           **{"trainer.save_freq": 1}), metrics_a)
    assert proc.returncode == 0, failure_report(proc)
    # the driver's plan counts data-parallel ranks: 2 ranks / TP 2 = dp 1, so a rank's mini-batch is 4 x 4 = 16 samples
    assert "world 2 / TP·PP·CP 2" in proc.stdout, proc.stdout[-3000:]
    assert "[trainer] global_pool: actor_rollout_ref on 2 rank(s)" in proc.stdout  # the reference in the policy worker
    run_a = read_metrics(metrics_a)
    _assert_grpo_metrics(run_a)

    resumed = {"trainer.resume_mode": "resume_path", "trainer.resume_from_path": f"{ckpt}/global_step_1",
               "trainer.val_before_train": False, "trainer.test_freq": -1}
    metrics_b = str(tmp_path / "b.jsonl")
    proc = run_main_ppo(megatron_grpo_args(tiny_gqa_qwen2_dir, arithmetic_data_dir, str(tmp_path / "ckpt_b"),
                                           tp_size=2, **resumed), metrics_b)
    assert proc.returncode == 0, failure_report(proc)
    assert f"[checkpoint] resuming from {ckpt}/global_step_1 (global step 1)" in proc.stdout
    run_b = read_metrics(metrics_b)
    assert sorted(run_b) == [2]
    for name in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl",
                 "critic/score/mean", "response_length/mean"):  # same weights, optimizer, RNG and data: same step
        assert run_b[2][name] == run_a[2][name], name  # fp32 on CPU, same kernels in the same order: bit-exact

    # the merger in this process (its CLI entry is run by tests/trainer's FSDP merges): no second interpreter start
    from hybridrl import model_merger

    hf_dir = tmp_path / "merged"
    model_merger.main(["merge", "--backend", "megatron", "--local_dir", f"{ckpt}/global_step_2/actor",
                       "--target_dir", str(hf_dir)])
    _assert_trained_hf_folder(tiny_gqa_qwen2_dir, str(hf_dir))


def _assert_grpo_metrics(metrics: dict[int, dict[str, float]]) -> None:
    """Validation at steps 0 and 2, finite losses, the hf rollout synced from the Megatron actor, the actor moved."""
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


def _assert_trained_hf_folder(initial_dir: str, merged_dir: str) -> None:
    """The merged folder loads with transformers, has the initial model's tensors (names, shapes) and new values."""
    import torch
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(initial_dir).state_dict()
    trained = AutoModelForCausalLM.from_pretrained(merged_dir).state_dict()
    assert {k: v.shape for k, v in trained.items()} == {k: v.shape for k, v in initial.items()}
    assert all(torch.isfinite(value).all() for value in trained.values())
    changed = [name for name in initial if not torch.equal(initial[name], trained[name])]
    assert len(changed) > len(initial) // 2, changed  # two Adam steps at lr 1e-3 move (almost) every tensor


_DIST_CKPT_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")


def _ppo_dp2_args(model_dir: str, data_dir: str, ckpt: str, **overrides: object) -> list[str]:
    """PPO at TP=1, DP=2, the Megatron critic colocated, KL in the reward, no validation."""
    ppo = {**ppo_overrides(model_dir), "trainer.test_freq": -1, "trainer.val_before_train": False, **overrides}
    return megatron_grpo_args(model_dir, data_dir, ckpt, tp_size=1, **ppo)


@pytest.fixture(scope="module")
def ppo_dp2_run(tiny_gqa_qwen2_dir, arithmetic_data_dir, tmp_path_factory):  # noqa: F811
    """One PPO run (2 steps, a checkpoint of both roles at step 2), every role converted from the HF folder: its
    checks are test_ppo_megatron_critic_dp2_end_to_end's, and its step 1 is the dist-checkpoint test's baseline
    (that test once made this same step-1 run itself). Returns ``(stdout, metrics, checkpoint folder)``."""
    root = tmp_path_factory.mktemp("megatron_ppo_dp2")
    metrics_file = str(root / "metrics.jsonl")
    proc = run_main_ppo(_ppo_dp2_args(tiny_gqa_qwen2_dir, arithmetic_data_dir, str(root / "ckpt"),
                                      **{"trainer.save_freq": 2}), metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    return proc.stdout, read_metrics(metrics_file), root / "ckpt"


def test_ppo_megatron_critic_dp2_end_to_end(ppo_dp2_run):
    stdout, metrics, ckpt = ppo_dp2_run
    assert "world 2 / TP·PP·CP 1" in stdout  # dp 2: 8 samples per step, 4 per rank
    assert "[trainer] global_pool: actor_rollout_ref, critic on 2 rank(s)" in stdout, stdout[-3000:]
    assert sorted(metrics) == [1, 2]
    for step in (1, 2):
        for name in ("critic/vf_loss", "critic/values/mean", "critic/vf_explained_var", "critic/returns/mean",
                     "actor/pg_loss", "actor/reward_kl_penalty"):
            _finite(metrics[step], name)
        assert _finite(metrics[step], "critic/grad_norm") > 0 and _finite(metrics[step], "actor/grad_norm") > 0
    # KL in the reward: at step 1 the actor is still the reference (the same weights on the same layout), at step 2
    # step 1's update has moved it
    assert abs(metrics[1]["actor/reward_kl_penalty"]) < 1e-6 < abs(metrics[2]["actor/reward_kl_penalty"])
    for role in ("actor", "critic"):  # both Megatron roles wrote a complete per-rank checkpoint at step 2
        folder = ckpt / "global_step_2" / role
        assert (folder / "megatron_checkpoint.json").is_file() and (folder / "checkpoint_complete.json").is_file()


def test_main_ppo_with_every_role_from_the_dist_checkpoint(ppo_dp2_run, tiny_gqa_qwen2_dir, arithmetic_data_dir,  # noqa: F811
                                                           dist_ckpt_dir, tmp_path):
    """``main_ppo`` PPO step 1 (TP=1, DP=2, Megatron critic colocated, KL in the reward) with the actor, the reference
    and the critic trunk from the dist checkpoint (the converter CLI's, tests/megatron/conftest.py) equals the same
    step with every role converted from the HF folder (:func:`ppo_dp2_run`'s step 1: the LR is constant, so the
    run's length does not change step 1)."""
    hf_stdout, hf_metrics, _ckpt = ppo_dp2_run
    dist = {f"{section}.megatron.{key}": value for section in _DIST_CKPT_SECTIONS
            for key, value in (("use_dist_checkpointing", True), ("dist_checkpointing_path", dist_ckpt_dir))}
    proc = run_main_ppo(_ppo_dp2_args(tiny_gqa_qwen2_dir, arithmetic_data_dir, str(tmp_path / "dist"),
                                      **{"trainer.total_training_steps": 1}, **dist), str(tmp_path / "dist.jsonl"))
    assert proc.returncode == 0, failure_report(proc)
    metrics = {"hf": hf_metrics[1], "dist": read_metrics(str(tmp_path / "dist.jsonl"))[1]}
    for name, stdout in (("hf", hf_stdout), ("dist", proc.stdout)):
        loaded = [section for section in _DIST_CKPT_SECTIONS
                  if f"[megatron] {section}.megatron.dist_checkpointing_path: " in stdout]
        assert loaded == ([] if name == "hf" else list(_DIST_CKPT_SECTIONS)), name
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/reward_kl_penalty", "critic/vf_loss", "critic/values/mean",
                "critic/grad_norm", "critic/score/mean", "response_length/mean"):
        print(f"{key}: hf {metrics['hf'][key]}, dist {metrics['dist'][key]}")
        assert metrics["dist"][key] == metrics["hf"][key], key  # same weights, same kernels: bit-exact
