"""RayPPOTrainer's step logic with fake worker groups (tests/recipes/fakes.py; the real ones run in the CLI
e2e tests). The stages are called as the trainer calls them (``stages.*`` with the trainer's parts); the
stage functions' own contract is in test_stages_on_cpu.py.

Each knob is checked for the behaviour verl gives it: rollout.n repeats prompts (interleaved, one uid per
prompt), balance_batch reorders and logs global_seqlen/*, use_kl_loss brings in the reference policy,
critic_warmup delays actor updates, total_training_steps stops the loop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from config_testlib import compose_config

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import ray_trainer, stages
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from tests.recipes.fakes import R as RESPONSE_LENGTH
from tests.recipes.fakes import make_trainer


def _config(data_dir: str, model_dir: str, tmp_path, **overrides):
    args = {
        "algorithm.adv_estimator": "grpo", "data.train_files": f"{data_dir}/train.parquet",
        "data.val_files": f"{data_dir}/test.parquet", "data.train_batch_size": 4, "data.max_prompt_length": 64,
        "data.max_response_length": RESPONSE_LENGTH, "data.dataloader_num_workers": 0,
        "actor_rollout_ref.model.path": model_dir, "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2, "trainer.total_training_steps": 2,
        "trainer.device": "cpu", "trainer.test_freq": -1, "trainer.save_freq": -1, "trainer.logger": "[console]",
        "trainer.default_local_dir": str(tmp_path / "ckpt"), "trainer.val_before_train": False,
    }
    args.update(overrides)
    return compose_config("ppo_trainer", [f"{k}={v}" for k, v in args.items()])


def _calls(trainer, name: str) -> list[int]:
    return [size for called, size in trainer.actor_rollout_wg.calls if called == name]


def _generate(trainer):
    """The generate stage on the trainer's first batch of prompts, as the trainer runs it (step 1)."""
    prompts = DataProto.from_single_dict(next(iter(trainer.train_dataloader)))
    return stages.generate(prompts, trainer.actor_rollout_wg, trainer.settings, global_steps=1,
                           reward_fn=trainer.reward_fn)


@pytest.fixture()
def setup(tiny_model_dir, arithmetic_data_dir, tmp_path):
    def build(use_ref: bool = False, **overrides):
        config = _config(arithmetic_data_dir, tiny_model_dir, tmp_path, **overrides)
        return make_trainer(RayPPOTrainer, config, use_ref)

    return build


def test_rollout_n_repeats_prompts_interleaved_with_one_uid_per_prompt(setup):
    trainer = setup(**{"actor_rollout_ref.rollout.n": 3, "trainer.balance_batch": False})
    batch, _ = _generate(trainer)
    generated = trainer.actor_rollout_wg.generated[0].batch["input_ids"]
    assert generated.shape[0] == 4 * 3
    assert torch.equal(generated[0], generated[1]) and torch.equal(generated[1], generated[2])  # interleaved
    uids = batch.non_tensor_batch["uid"]
    assert len(set(uids)) == 4 and list(uids[:3]) == [uids[0]] * 3


def test_balance_batch_reorders_and_logs(setup):
    for balance in (True, False):
        trainer = setup(**{"trainer.balance_batch": balance})
        batch, metrics = _generate(trainer)
        assert ("global_seqlen/balanced_max" in metrics) is balance
        if balance:  # the two halves (one per rank) carry token counts as equal as the partition allows
            lengths = batch.batch["attention_mask"].sum(-1)
            half = len(lengths) // 2
            assert abs(lengths[:half].sum() - lengths[half:].sum()) <= metrics["global_seqlen/balanced_max"] - \
                metrics["global_seqlen/balanced_min"]


def test_use_kl_loss_needs_and_calls_the_reference_policy(setup):
    trainer = setup(use_ref=True, **{"actor_rollout_ref.actor.use_kl_loss": True})
    trainer.fit()
    assert _calls(trainer, "compute_ref_log_prob") == [8, 8]
    trainer = setup(use_ref=False)
    trainer.fit()
    assert _calls(trainer, "compute_ref_log_prob") == []


def test_critic_warmup_delays_actor_updates(setup):
    trainer = setup(**{"trainer.critic_warmup": 2, "trainer.total_training_steps": 3})
    trainer.fit()
    # verl: update the actor once critic_warmup <= global_steps → steps 2 and 3 only
    assert len(_calls(trainer, "update_actor")) == 2 and len(_calls(trainer, "generate_sequences")) == 3


def test_total_training_steps_stops_the_loop(setup):
    trainer = setup(**{"trainer.total_training_steps": 3})
    assert trainer.total_training_steps == 3
    assert trainer.batch_plan.policy_worker_plan().total_training_steps == 3  # fed to the LR scheduler
    trainer.fit()
    assert len(_calls(trainer, "update_actor")) == 3 and trainer.global_steps == 3


def test_total_training_steps_defaults_to_epochs_times_loader_length(setup):
    trainer = setup(**{"trainer.total_training_steps": "null", "trainer.total_epochs": 2})
    assert trainer.total_training_steps == 2 * len(trainer.train_dataloader) == 2 * (16 // 4)


def test_grpo_advantages_are_per_uid_group(setup):
    trainer = setup(**{"trainer.total_training_steps": 1})
    batch, _ = _generate(trainer)
    batch, _ = stages.reward(batch, trainer.reward_fn)
    batch, _ = stages.old_log_prob(batch, trainer.actor_rollout_wg, trainer.settings)
    batch, _ = stages.advantage(batch, trainer.settings, trainer.kl_ctrl_in_reward, global_steps=1)
    adv = batch.batch["advantages"].sum(-1) / batch.batch["response_mask"].sum(-1)
    uids = batch.non_tensor_batch["uid"]
    for uid in set(uids):
        group = adv[torch.tensor(np.asarray(uids == uid))]
        assert torch.allclose(group.mean(), torch.tensor(0.0), atol=1e-5)


def test_a_failing_worker_call_names_the_step_and_stage(setup):
    from hybridrl.trainer.ppo.stages import StageError

    trainer = setup()

    def dead_worker(batch):
        raise RuntimeError("worker group 'actor_rollout' rank 1 died: SIGKILL")

    trainer.actor_rollout_wg.update_actor = dead_worker
    with pytest.raises(StageError, match=r"training step 1 failed in stage 'update_actor'.*rank 1 died"):
        trainer.fit()


def test_a_raising_reward_function_names_the_sample(setup, tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                   "    raise ValueError('cannot parse')\n")
    trainer = setup(**{"custom_reward_function.path": str(bad)})
    with pytest.raises(Exception, match=r"stage 'reward'.*(sample|index).*arithmetic") as info:
        trainer.fit()
    assert "cannot parse" in str(info.value)


class _WaitingCritic:
    """A critic whose update waits (up to ``timeout_s``) for the actor update to start, and reports whether it did."""

    def __init__(self, actor_started, timeout_s: float):
        self.actor_started, self.timeout_s = actor_started, timeout_s

    def update_critic(self, batch: DataProto) -> DataProto:
        overlapped = self.actor_started.wait(timeout=self.timeout_s)
        return DataProto(meta_info={"metrics": {"critic/vf_loss": [0.5], "test/overlapped": [float(overlapped)]}})


@pytest.mark.parametrize(("critic_pool", "timeout_s", "overlapped"), [("critic_pool", 60.0, 1.0), ("global_pool", 0.5, 0.0)])
def test_split_placement_overlaps_critic_and_actor_updates(setup, critic_pool, timeout_s, overlapped):
    """Critic on its own pool: update_critic and update_actor run at the same time; colocated: one after the other."""
    import threading

    from hybridrl.trainer.ppo.ppo_update import update_models
    from hybridrl.trainer.ppo.roles import Role
    from hybridrl.trainer.ppo.worker_groups import critic_has_own_pool

    trainer = setup(**{"algorithm.adv_estimator": "gae"})
    actor_started = threading.Event()
    actor_update = trainer.actor_rollout_wg.update_actor

    def update_actor(batch: DataProto) -> DataProto:
        actor_started.set()
        return actor_update(batch)

    trainer.actor_rollout_wg.update_actor = update_actor
    trainer.critic_wg = _WaitingCritic(actor_started, timeout_s)
    trainer.resource_pool_manager.mapping = {Role.ActorRollout: "global_pool", Role.Critic: critic_pool}
    overlap = critic_has_own_pool(trainer.resource_pool_manager)
    _, metrics = update_models(DataProto.from_dict({"x": torch.zeros(2, 1)}), trainer.workers, trainer.settings,
                               update_actor=True, overlap=overlap)
    assert metrics["test/overlapped"] == overlapped
    assert "critic/vf_loss" in metrics and "actor/pg_loss" in metrics
    assert _calls(trainer, "update_actor") == [2]


class _TwoPromptBatchesPerStep:
    """A batch collector that needs two dataloader batches per step: it trains on the second one's responses."""

    def __init__(self):
        self.calls = 0

    def collect(self, prompts: DataProto, rollout):
        self.calls += 1
        if self.calls % 2:
            return None, {}
        batch, metrics = rollout(prompts)
        return batch, {**metrics, "test/collect_calls": float(self.calls)}


def test_a_batch_collector_passed_to_the_trainer_builds_every_step(tiny_model_dir, arithmetic_data_dir, tmp_path):
    collector = _TwoPromptBatchesPerStep()
    config = _config(arithmetic_data_dir, tiny_model_dir, tmp_path)
    trainer = make_trainer(RayPPOTrainer, config, batch_collector=collector)
    assert trainer.batch_collector is collector
    trainer.fit()
    assert collector.calls == 4  # 2 steps × 2 prompt batches
    assert _calls(trainer, "generate_sequences") == [8, 8] and _calls(trainer, "update_actor") == [8, 8]
    assert trainer.global_steps == 2


def test_worker_group_attributes_delegate_to_the_workers_record(setup):
    trainer = setup()
    assert trainer.workers.actor_rollout is trainer.actor_rollout_wg
    assert not hasattr(trainer, "critic_wg") and not trainer.workers.use_critic  # grpo: no critic
    critic = object()
    trainer.critic_wg = critic
    assert trainer.workers.critic is critic and trainer.workers.use_critic
    assert trainer.workers.actor_rollout is trainer.actor_rollout_wg  # the other groups are kept


def test_a_step_with_sum_pi_squared_reports_verl_variance_proxies(setup, monkeypatch):
    """actor.calculate_sum_pi_squared: the step's metrics carry verl 0.9's ``variance_proxy/*`` (the formulas:
    test_metric_utils_on_cpu.py), fed the actor's ``actor/grad_norm``; without Σπ² there are none."""
    trainer = setup(**{"trainer.total_training_steps": 1})
    actor, logged = trainer.actor_rollout_wg, []
    plain_log_prob, plain_update = actor.compute_log_prob, actor.update_actor

    def log_prob_with_sum_pi_squared(batch):  # π(y_t) = 1 and Σπ² = 1.5: W = 0.5 per response token
        output = plain_log_prob(batch)
        output.batch["sum_pi_squared"] = torch.full((len(batch), RESPONSE_LENGTH), 1.5)
        return output

    def update_with_grad_norm(batch):
        output = plain_update(batch)
        output.meta_info["metrics"]["actor/grad_norm"] = [0.5]
        return output

    class Recorded:  # the step metrics fit() logs
        def __init__(self, **kwargs):
            pass

        def log(self, data, step):
            logged.append(data)

        def finish(self):
            pass

    monkeypatch.setattr(ray_trainer, "Tracking", Recorded)
    actor.update_actor = update_with_grad_norm
    trainer.fit()
    assert not any(key.startswith("variance_proxy/") for key in logged[-1])
    actor.compute_log_prob = log_prob_with_sum_pi_squared
    trainer.total_training_steps, logged[:] = 2, []
    trainer.fit()
    metrics = logged[-1]
    assert metrics["variance_proxy/proxy1_signal_strength"] == pytest.approx(0.25)
    assert metrics["variance_proxy/expected_w"] == pytest.approx(0.5 * metrics["response_length/mean"])
