"""Rollout routing replay (R3) end to end on a tiny Qwen3-MoE: the hf rollout records each token's experts, the
actor replays them after the router moved and gets the rollout's log-probs back."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from moe_testlib import moe_actor_config, perturb_routers, tiny_qwen3_moe
from omegaconf import open_dict
from rollout_testlib import rollout_config

from hybridrl.models.transformers.moe_router import capture_routing
from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.rollout.hf_rollout import HFRollout
from hybridrl.workers.rollout.routing_record import record_routed_experts

PAD, EOS = 0, 1


def _prompts(batch_size: int = 4, prompt_len: int = 6) -> DataProto:
    """Left-padded random prompts ``[B, P]`` (lengths 6, 5, 4, 6)."""
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 500, (batch_size, prompt_len), generator=gen)
    mask = torch.ones_like(input_ids)
    for row in range(batch_size):
        mask[row, : row % 3] = 0
    input_ids = torch.where(mask.bool(), input_ids, PAD)
    tensors = {"input_ids": input_ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    return DataProto.from_dict(tensors=tensors, meta_info={"eos_token_id": EOS, "pad_token_id": PAD})


@functools.cache
def _rollout_section():
    return rollout_config(response_length=6)


def _rollout(model, record: bool) -> DataProto:
    config = copy.deepcopy(_rollout_section())
    with open_dict(config):
        config.enable_rollout_routing_replay = record
    return HFRollout(model, config, eos_token_ids=[EOS], pad_token_id=PAD, seed=0).generate_sequences(_prompts())


def test_record_holds_every_token_s_experts():
    model = tiny_qwen3_moe(top_k=2)
    batch = _rollout(model, record=True).batch
    record = batch["routed_experts"]
    assert record.shape == (*batch["input_ids"].shape, 2, 2)  # [B, S, L, k]
    assert record.dtype == torch.int16 and 0 <= int(record.min()) and int(record.max()) < 4
    # row by row (micro-batches of 1) gives the same record as the whole batch
    by_row = record_routed_experts(
        model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], micro_batch_size=1
    )
    assert torch.equal(by_row, record)
    # a valid token's record is the routing of a plain forward
    with torch.no_grad(), capture_routing(model) as capture:
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"])
    plain = torch.stack(capture.expert_ids[0], dim=1).reshape(record.shape)
    valid = batch["attention_mask"].bool()
    assert torch.equal(plain[valid].to(torch.int16), record[valid])


def test_without_the_switch_nothing_is_recorded():
    assert "routed_experts" not in _rollout(tiny_qwen3_moe(), record=False).batch.keys()


@pytest.mark.parametrize("packed", [False, True])
def test_replay_gives_back_the_rollout_log_probs_after_the_router_moved(packed):
    # top-1 with normalised weights: the chosen expert's weight is 1 whatever the logits, so a token's log-prob
    # depends on the router only through which expert it picks
    rollout_model = tiny_qwen3_moe(top_k=1)
    data = _rollout(rollout_model, record=True)
    response_mask = data.batch["attention_mask"][:, -data.batch["responses"].shape[1] :]
    data.meta_info.update(temperature=1.0, micro_batch_size=4)
    trainer_model = perturb_routers(rollout_model)

    def trainer_log_probs(mode: str) -> torch.Tensor:
        actor = DataParallelPPOActor(moe_actor_config(packed, replay_mode=mode), trainer_model)
        return actor.compute_log_prob(data)[0] * response_mask

    rollout_log_probs = data.batch["rollout_log_probs"] * response_mask
    torch.testing.assert_close(trainer_log_probs("R3"), rollout_log_probs, rtol=1e-4, atol=1e-4)
    assert (trainer_log_probs("disabled") - rollout_log_probs).abs().max() > 1e-3
