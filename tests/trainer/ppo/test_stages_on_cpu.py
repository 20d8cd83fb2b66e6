"""The stage functions' contract, with fake worker groups: each takes the batch and returns ``(batch, metrics)``
with its ``timing_s/<stage>``, adds the keys of the table in stages.py, and leaves the batch it was given alone
(tensors, arrays and meta_info as they were); a failure is a StageError naming the stage."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hybridrl.config import compose_config
from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.core_algos import get_kl_controller
from hybridrl.trainer.ppo.ppo_update import PPOUpdate
from hybridrl.trainer.ppo.stages import StageError, StepSettings
from hybridrl.trainer.ppo.worker_groups import WorkerGroups
from tests.recipes.fakes import FakeActorRolloutWG, R

EOS, PAD = 2, 0


def _settings(*overrides: str) -> tuple[StepSettings, object]:
    config = compose_config("ppo_trainer", ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=True",
                                            "actor_rollout_ref.rollout.n=2", *overrides])
    tokenizer = SimpleNamespace(eos_token_id=EOS, pad_token_id=PAD)
    return StepSettings.from_config(config, tokenizer), config


def _prompts() -> DataProto:
    """2 left-padded prompts of length 3, as the dataloader gives them."""
    attention_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    return DataProto.from_dict(
        tensors={"input_ids": torch.tensor([[PAD, 5, 6], [4, 5, 6]]), "attention_mask": attention_mask,
                 "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0)},
        non_tensors={"data_source": np.array(["toy", "toy"], dtype=object)},
        meta_info={"from": "dataloader"},
    )


def _reward_fn(batch: DataProto, return_dict: bool = False):
    """Score = response length, on the last valid response token; ``acc`` = length is even."""
    mask = batch.batch["response_mask"]
    lengths = mask.sum(-1)
    scores = torch.zeros_like(mask, dtype=torch.float32)
    scores[torch.arange(len(lengths)), lengths - 1] = lengths.float()
    return {"reward_tensor": scores, "reward_extra_info": {"acc": (lengths % 2 == 0).tolist()}}


class _FakeCritic:
    world_size = 2

    def compute_values(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict({"values": torch.full((len(batch), R), 0.5)})

    def update_critic(self, batch: DataProto) -> DataProto:
        return DataProto(meta_info={"metrics": {"critic/vf_loss": [0.25, 0.75]}})


def _snapshot(batch: DataProto):
    tensors = {key: value.clone() for key, value in batch.batch.items()}
    return tensors, {k: v.copy() for k, v in batch.non_tensor_batch.items()}, copy.deepcopy(batch.meta_info)


def _assert_unchanged(batch: DataProto, snapshot) -> None:
    tensors, arrays, meta_info = snapshot
    assert sorted(batch.batch.keys()) == sorted(tensors)
    assert all(torch.equal(batch.batch[key], value) for key, value in tensors.items())
    assert sorted(batch.non_tensor_batch) == sorted(arrays)
    assert all(list(batch.non_tensor_batch[k]) == list(v) for k, v in arrays.items())
    assert batch.meta_info == meta_info


def _run(stage, batch: DataProto, *args, **kwargs) -> tuple[DataProto, dict]:
    """Call a stage; check it returns (DataProto, dict) and left ``batch`` as it was."""
    snapshot = _snapshot(batch)
    result = stage(batch, *args, **kwargs)
    assert isinstance(result, tuple) and len(result) == 2
    out, metrics = result
    assert isinstance(out, DataProto) and isinstance(metrics, dict)
    _assert_unchanged(batch, snapshot)
    return out, metrics


def test_each_stage_returns_batch_and_metrics_and_leaves_its_input_alone():
    settings, config = _settings()
    actor, critic = FakeActorRolloutWG(EOS, PAD), _FakeCritic()
    kl_ctrl = get_kl_controller(config.algorithm.kl_ctrl)

    batch, metrics = _run(stages.generate, _prompts(), actor, settings, global_steps=3)
    assert {"uid", "data_source"} <= set(batch.non_tensor_batch) and len(batch) == 4  # 2 prompts × n=2
    assert {"prompts", "responses", "response_mask"} <= set(batch.batch.keys())
    assert "timing_s/gen" in metrics and "global_seqlen/balanced_max" in metrics  # trainer.balance_batch=True
    assert batch.meta_info["global_token_num"] == batch.batch["attention_mask"].sum(-1).tolist()
    assert actor.generated[0].meta_info["global_steps"] == 3

    batch, metrics = _run(stages.reward, batch, _reward_fn)
    assert "token_level_scores" in batch.batch.keys() and "acc" in batch.non_tensor_batch
    assert set(metrics) == {"timing_s/reward"}
    batch, metrics = _run(stages.old_log_prob, batch, actor, settings)
    assert "old_log_probs" in batch.batch.keys() and "timing_s/old_log_prob" in metrics
    batch, metrics = _run(stages.ref_log_prob, batch, actor)
    assert "ref_log_prob" in batch.batch.keys() and set(metrics) == {"timing_s/ref"}
    batch, metrics = _run(stages.values, batch, critic)
    assert "values" in batch.batch.keys() and set(metrics) == {"timing_s/values"}
    batch, metrics = _run(stages.advantage, batch, settings, kl_ctrl, 3)
    assert {"token_level_rewards", "advantages", "returns"} <= set(batch.batch.keys())
    assert {"timing_s/adv", "actor/reward_kl_penalty"} <= set(metrics)

    _, metrics = _run(stages.update_critic, batch, critic)
    assert metrics["critic/vf_loss"] == 0.5 and "timing_s/update_critic" in metrics  # mean of the ranks' values
    _, metrics = _run(stages.update_actor, batch, actor, settings)
    assert "actor/pg_loss" in metrics and "timing_s/update_actor" in metrics
    # per-call values only: the worker's actor was built with the rollout temperature
    assert "temperature" not in actor.updates[-1].meta_info


def test_ppo_update_stage_runs_the_stages_in_order_and_leaves_its_input_alone():
    settings, config = _settings()
    actor, critic = FakeActorRolloutWG(EOS, PAD), _FakeCritic()
    workers = WorkerGroups(actor_rollout=actor, critic=critic, ref=actor)
    batch, _ = stages.reward(stages.generate(_prompts(), actor, settings, global_steps=1)[0], _reward_fn)
    update = PPOUpdate(settings, get_kl_controller(config.algorithm.kl_ctrl), critic_warmup=0, overlap_updates=False)
    out, metrics = _run(update.run, batch, workers, 1)
    assert [name for name, _ in actor.calls] == [
        "generate_sequences", "compute_log_prob", "compute_ref_log_prob", "update_actor"]
    assert {f"timing_s/{s}" for s in ("old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")} \
        <= set(metrics)
    assert "critic/vf_explained_var" in update.data_metrics(out, workers)


def test_balance_order_puts_similar_token_counts_on_each_rank():
    batch = DataProto.from_dict({"attention_mask": torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0],
                                                                 [1, 1, 0, 0]])})
    order, metrics = stages.balance_order(batch, world_size=2)
    lengths = batch.batch["attention_mask"].sum(-1)[order]
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    assert lengths[:2].sum() == lengths[2:].sum() == 5  # {4, 1} and {3, 2}
    assert metrics["global_seqlen/balanced_max"] == metrics["global_seqlen/balanced_min"] == 5


def test_a_failing_worker_call_is_a_stage_error_naming_the_stage():
    class _DeadCritic:
        def compute_values(self, batch):
            raise RuntimeError("rank 0 died")

    batch = DataProto.from_dict({"x": torch.zeros(2, 1)})
    with pytest.raises(StageError, match=r"stage 'values' failed: RuntimeError: rank 0 died") as info:
        stages.values(batch, _DeadCritic())
    assert info.value.stage == "values" and info.value.step is None


def test_stage_error_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(StageError("reward", "ValueError: bad", step=4)))
    assert (error.stage, error.step) == ("reward", 4)
    assert str(error) == "training step 4 failed in stage 'reward': ValueError: bad"
