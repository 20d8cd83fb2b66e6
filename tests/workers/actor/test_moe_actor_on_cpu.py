"""MoE actor: router aux loss in the loss, expert-load metrics, routing replay (R3), on a tiny Qwen3-MoE."""

from __future__ import annotations

import copy

import pytest
import torch
from moe_testlib import AUX_LOSS_COEF, moe_actor_config, perturb_routers, tiny_gpt_oss, tiny_qwen3_moe

from hybridrl.models.transformers.moe_router import capture_routing, router_modules
from hybridrl.workers.actor import DataParallelPPOActor
from tests.workers.actor.conftest import make_ppo_batch

COEF = AUX_LOSS_COEF


def _loss_and_router_grad(model, config, micro_batch):
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    actor = DataParallelPPOActor(config, model, optimizer)
    loss, metrics = actor._policy_loss(micro_batch, temperature=1.0)
    loss.backward()
    return loss.detach(), metrics, router_modules(model)[0].weight.grad.clone()


@pytest.mark.parametrize("packed", [False, True])
def test_aux_loss_adds_coef_times_the_models_aux_loss(packed):
    model = tiny_qwen3_moe()
    micro_batch = make_ppo_batch(batch_size=4, seed=1).batch
    off = _loss_and_router_grad(model, moe_actor_config(packed), micro_batch)
    on = _loss_and_router_grad(model, moe_actor_config(packed, aux_loss=True), micro_batch)
    assert "actor/aux_loss" not in off[1]
    aux = on[1]["actor/aux_loss"]
    # the model's own aux loss over the valid tokens (HF masks padding with the attention mask)
    with torch.no_grad():
        expected = model(
            input_ids=micro_batch["input_ids"], attention_mask=micro_batch["attention_mask"], output_router_logits=True
        ).aux_loss
    assert aux == pytest.approx(expected.item(), rel=1e-5)
    torch.testing.assert_close(on[0] - off[0], torch.tensor(COEF * aux), rtol=1e-5, atol=1e-6)
    # the aux loss's gradient reaches the router
    assert (on[2] - off[2]).abs().max() > 1e-6


def test_aux_loss_refused_for_a_dense_model(causal_lm):
    with pytest.raises(ValueError, match="use_router_aux_loss=False"):
        DataParallelPPOActor(moe_actor_config(aux_loss=True), causal_lm)


def test_update_logs_expert_load_every_interval():
    model = tiny_qwen3_moe()
    actor = DataParallelPPOActor(
        moe_actor_config(), model, torch.optim.SGD(model.parameters(), lr=0.0), moe_load_balance_metrics_interval=2
    )
    data = make_ppo_batch(batch_size=4, seed=2)
    first, second = actor.update_policy(data), actor.update_policy(data)
    assert not any(key.startswith("actor/moe/") for key in first)
    layer_keys = {f"actor/moe/{name}/layer_{layer}" for name in ("max_vio", "min_vio", "avg_vio") for layer in (0, 1)}
    assert layer_keys <= set(second)
    # vio = 4 f - 1 lies in [-1, 3] and max >= 0 >= min in every layer
    assert all(-1.0 <= second[key][0] <= 3.0 for key in layer_keys)
    assert second["actor/moe/max_vio/max"][0] >= 0.0 >= second["actor/moe/min_vio/avg"][0]


def test_captured_routing_covers_the_valid_tokens_in_both_layouts():
    model = tiny_qwen3_moe()
    data = make_ppo_batch(batch_size=4, seed=3)
    data.meta_info["micro_batch_size"] = 4
    valid = int(data.batch["attention_mask"].sum())
    ids = {}
    for packed in (False, True):
        actor = DataParallelPPOActor(moe_actor_config(packed), model)
        with capture_routing(model) as capture:
            actor.compute_log_prob(data)
        ids[packed] = capture.valid_expert_ids()
        assert ids[packed].shape == (valid, 2, 2)  # [valid tokens, L, k]
    assert torch.equal(ids[False], ids[True])


def _record_rollout_routing(model, data) -> torch.Tensor:
    """The routing a rollout would record: every position of ``input_ids``: ``[B, S, L, k]``."""
    input_ids = data.batch["input_ids"]
    with torch.no_grad(), capture_routing(model) as capture:
        model(input_ids=input_ids, attention_mask=data.batch["attention_mask"], position_ids=data.batch["position_ids"])
    return torch.stack(capture.expert_ids[0], dim=1).reshape(*input_ids.shape, 2, -1)


def _log_probs(model, data, packed, replay):
    data.meta_info["micro_batch_size"] = 4
    config = moe_actor_config(packed, replay_mode="R3" if replay else "disabled")
    log_probs, _ = DataParallelPPOActor(config, model).compute_log_prob(data)
    return log_probs * data.batch["response_mask"]


@pytest.mark.parametrize("packed", [False, True])
def test_replaying_the_own_routing_changes_nothing(packed):
    model = tiny_qwen3_moe(top_k=2)
    data = make_ppo_batch(batch_size=4, seed=4)
    data.batch["routed_experts"] = _record_rollout_routing(model, data)
    torch.testing.assert_close(_log_probs(model, data, packed, True), _log_probs(model, data, packed, False))


@pytest.mark.parametrize("packed", [False, True])
def test_replay_restores_the_rollout_log_probs_after_the_router_moved(packed):
    # top-1 with normalised weights: the chosen expert's weight is 1 whatever the logits, so the log-probs depend
    # on the router only through which expert it picks
    rollout_model = tiny_qwen3_moe(top_k=1)
    data = make_ppo_batch(batch_size=4, seed=5)
    data.batch["routed_experts"] = _record_rollout_routing(rollout_model, data)
    rollout_log_probs = _log_probs(rollout_model, data, packed, replay=False)
    trainer_model = perturb_routers(rollout_model)
    replayed = _log_probs(trainer_model, data, packed, replay=True)
    free = _log_probs(trainer_model, data, packed, replay=False)
    torch.testing.assert_close(replayed, rollout_log_probs)
    assert (free - rollout_log_probs).abs().max() > 1e-3


def test_replay_without_a_record_names_the_rollout_key():
    model = tiny_qwen3_moe()
    data = make_ppo_batch(batch_size=2, seed=6)
    with pytest.raises(KeyError, match="enable_rollout_routing_replay"):
        _log_probs(model, data, packed=False, replay=True)


def test_unsupported_replay_mode_is_refused():
    with pytest.raises(ValueError, match="router_replay.mode='R2'"):
        DataParallelPPOActor(moe_actor_config(replay_mode="R2"), tiny_qwen3_moe())


def test_gpt_oss_aux_loss_and_replay():
    """GPT-OSS's router (softmax over the k chosen logits, a bias): the aux loss enters the loss and replaying its
    own routing changes no log-prob."""
    model = tiny_gpt_oss()
    data = make_ppo_batch(batch_size=4, seed=7)
    off = _loss_and_router_grad(model, moe_actor_config(), data.batch)
    on = _loss_and_router_grad(model, moe_actor_config(aux_loss=True), data.batch)
    torch.testing.assert_close(on[0] - off[0], torch.tensor(COEF * on[1]["actor/aux_loss"]), rtol=1e-5, atol=1e-6)
    data.batch["routed_experts"] = _record_rollout_routing(model, data)
    torch.testing.assert_close(_log_probs(model, data, False, True), _log_probs(model, data, False, False))


def test_unregistered_moe_family_is_refused(monkeypatch):
    from hybridrl.models import families

    monkeypatch.setattr(families, "_BY_MODEL_TYPE", {})
    with pytest.raises(ValueError, match="router_replay path"):
        DataParallelPPOActor(moe_actor_config(aux_loss=True), tiny_qwen3_moe())
