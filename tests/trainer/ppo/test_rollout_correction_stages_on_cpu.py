"""The driver's rollout correction (stages.old_log_prob / advantage / update_actor) with a fake actor group:
decoupled mode adds the IS weights and the rejection mask, bypass mode skips the old-log-prob forward, and the
defaults leave the batch exactly as before."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hybridrl.config import compose_config
from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.stages import StepSettings

SECTION = "algorithm.rollout_correction"
# π_old / π_rollout per token: [[0.5, 1, 4], [1.5, 3, (padding)]], as in tests/algos/test_rollout_correction_on_cpu.py
OLD = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, 0.0]])
ROLLOUT = OLD - torch.log(torch.tensor([[0.5, 1.0, 4.0], [1.5, 3.0, 1.0]]))
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


class _FakeActor:
    """compute_log_prob answers OLD; update_actor records what it was sent."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.updates: list[DataProto] = []

    def compute_log_prob(self, batch: DataProto) -> DataProto:
        self.calls.append("compute_log_prob")
        return DataProto.from_dict({"old_log_probs": OLD.clone()})

    def update_actor(self, batch: DataProto) -> DataProto:
        self.calls.append("update_actor")
        self.updates.append(batch)
        return DataProto(meta_info={"metrics": {"actor/pg_loss": [0.0]}})


def _settings(*overrides: str) -> StepSettings:
    config = compose_config("ppo_trainer", ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                                            *overrides])
    return StepSettings.from_config(config, SimpleNamespace(eos_token_id=2, pad_token_id=0))


def _scored_batch(with_rollout_log_probs: bool = True) -> DataProto:
    """Two responses of one prompt (GRPO group), scores 1 and 0 on their last tokens."""
    tensors = {"responses": torch.full((2, 3), 7), "response_mask": MASK.clone(),
               "token_level_scores": torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])}
    if with_rollout_log_probs:
        tensors["rollout_log_probs"] = ROLLOUT.clone()
    return DataProto.from_dict(tensors, non_tensors={"uid": np.array(["a", "a"], dtype=object)})


def _through_advantage(settings: StepSettings, batch: DataProto, actor: _FakeActor) -> tuple[DataProto, dict]:
    batch, metrics = stages.old_log_prob(batch, actor, settings)
    batch, adv_metrics = stages.advantage(batch, settings, None, 1)
    return batch, {**metrics, **adv_metrics}


def test_defaults_leave_the_batch_as_before_and_add_no_metric():
    batch, metrics = _through_advantage(_settings(), _scored_batch(with_rollout_log_probs=False), _FakeActor())
    assert "rollout_is_weights" not in batch.batch.keys()
    assert torch.equal(batch.batch["response_mask"], MASK)
    assert not any(key.startswith("rollout_corr/") for key in metrics)


def test_modes_off_with_rollout_log_probs_only_log_metrics():
    plain, _ = _through_advantage(_settings(), _scored_batch(with_rollout_log_probs=False), _FakeActor())
    batch, metrics = _through_advantage(_settings(), _scored_batch(), _FakeActor())
    assert "rollout_is_weights" not in batch.batch.keys()
    assert batch.batch["response_mask"] is not None and torch.equal(batch.batch["response_mask"], MASK)
    assert torch.equal(batch.batch["advantages"], plain.batch["advantages"])
    # KL(π_rollout ‖ π_old), k1: mean of log π_rollout − log π_old = −log r over the 5 valid tokens
    assert metrics["rollout_corr/kl"] == pytest.approx(-math.log(0.5 * 1 * 4 * 1.5 * 3) / 5, rel=1e-5)


def test_decoupled_mode_adds_weights_and_rejects_before_the_advantages():
    settings = _settings(f"{SECTION}.rollout_is=token", f"{SECTION}.rollout_rs=token_k1",
                         f"{SECTION}.rollout_rs_threshold=2.5")
    actor = _FakeActor()
    batch, metrics = _through_advantage(settings, _scored_batch(), actor)
    assert actor.calls == ["compute_log_prob"]
    # TIS at 2: min(r, 2); token_k1 in [log 0.4, log 2.5] rejects r = 4 and r = 3
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.tensor([[0.5, 1.0, 2.0], [1.5, 2.0, 0.0]]))
    assert batch.batch["response_mask"].tolist() == [[1, 1, 0], [1, 0, 0]]
    assert bool((batch.batch["advantages"][batch.batch["response_mask"] == 0] == 0).all())
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(7 / 5)


def test_bypass_mode_uses_the_rollout_log_probs_and_tells_the_actor():
    settings = _settings(f"{SECTION}.bypass_mode=True", f"{SECTION}.loss_type=reinforce")
    actor = _FakeActor()
    batch, metrics = _through_advantage(settings, _scored_batch(), actor)
    assert actor.calls == []  # no old-log-prob forward
    assert torch.equal(batch.batch["old_log_probs"], ROLLOUT)
    assert "rollout_is_weights" not in batch.batch.keys() and not any(k.startswith("rollout_corr/") for k in metrics)
    stages.update_actor(batch, actor, settings)
    sent = actor.updates[-1].meta_info["rollout_correction"]
    assert sent.bypass_mode and sent.loss_type == "reinforce"
    assert "rollout_correction" not in batch.meta_info  # the driver's batch is left alone


def test_bypass_without_rollout_log_probs_says_how_to_fix_it():
    with pytest.raises(KeyError, match="calculate_log_probs=True"):
        stages.old_log_prob(_scored_batch(with_rollout_log_probs=False), _FakeActor(),
                            _settings(f"{SECTION}.bypass_mode=True"))


def test_decoupled_update_sends_no_meta_info():
    settings = _settings(f"{SECTION}.rollout_is=sequence")
    actor = _FakeActor()
    batch, _ = _through_advantage(settings, _scored_batch(), actor)
    stages.update_actor(batch, actor, settings)
    assert "rollout_correction" not in actor.updates[-1].meta_info
    assert "rollout_is_weights" in actor.updates[-1].batch.keys()
