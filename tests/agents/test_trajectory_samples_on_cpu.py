"""Completions recorded through the endpoint → training samples (chains), rewards placed on model tokens;
several samples per row travel through the trainer's stages with their row's columns."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hybridrl.agents.trajectory_samples import chain_completions, samples_from_completions
from hybridrl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from hybridrl.experimental.agent_loop.postprocess import outputs_to_batch
from hybridrl.protocol import DataProto
from hybridrl.protocol.keys import ROLLOUT_ROW_KEY
from hybridrl.trainer.ppo.stages import align_rows


def _record(prompt, response, logprob=-0.5):
    return SimpleNamespace(prompt_ids=prompt, response_ids=response, response_logprobs=[logprob] * len(response))


def test_a_replayed_conversation_is_one_chain_with_client_tokens_masked():
    records = [_record([1, 2], [3, 4]), _record([1, 2, 3, 4, 9, 9], [5]), _record([1, 2, 3, 4, 9, 9, 5, 8], [6, 7])]
    (chain,) = chain_completions(records)
    assert chain.prompt_ids == [1, 2]
    assert chain.response_ids == [3, 4, 9, 9, 5, 8, 6, 7]
    assert chain.response_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert chain.response_logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5, 0.0, -0.5, -0.5]
    assert chain.turn_ends == [1, 4, 7]


def test_a_fresh_conversation_starts_a_new_chain():
    records = [_record([1, 2], [3]), _record([7, 7], [8]), _record([1, 2, 3, 4], [5])]
    chains = chain_completions(records)
    assert [c.prompt_ids for c in chains] == [[1, 2], [7, 7]]
    assert chains[0].completions == [0, 2] and chains[1].completions == [1]


def test_rewards_land_on_model_tokens():
    records = [_record([1], [3, 4]), _record([1, 3, 4, 9], [5, 6]), _record([7], [8])]
    samples = samples_from_completions(records, 1.5, response_length=16, metrics=AgentLoopMetrics())
    assert [s.extra_fields["reward_scores"] for s in samples] == [{4: 1.5}, {0: 1.5}]  # each sample's last model token
    per_turn = samples_from_completions(records, [0.1, 0.2, 0.3], response_length=16, metrics=AgentLoopMetrics())
    assert per_turn[0].extra_fields["reward_scores"] == {1: 0.1, 4: 0.2}
    assert per_turn[1].extra_fields["reward_scores"] == {0: 0.3}
    cut = samples_from_completions(records[:2], [0.1, 0.2], response_length=3, metrics=AgentLoopMetrics())
    assert cut[0].response_ids == [3, 4, 9] and cut[0].extra_fields["reward_scores"] == {1: 0.1, 2: 0.2}
    with pytest.raises(ValueError, match="per-turn rewards"):
        samples_from_completions(records, [1.0], response_length=16, metrics=AgentLoopMetrics())


def test_reward_scores_become_rm_scores_and_mixing_is_refused():
    scored = AgentLoopOutput([1], [2, 3], [1, 1], extra_fields={"reward_scores": {1: 2.0}})
    batch = outputs_to_batch([scored], prompt_length=2, response_length=3, pad_token_id=0)
    assert batch.batch["rm_scores"].tolist() == [[0.0, 2.0, 0.0]]
    assert "reward_scores" not in batch.non_tensor_batch
    with pytest.raises(ValueError, match="scored"):
        outputs_to_batch([scored, AgentLoopOutput([1], [2], [1])], prompt_length=2, response_length=3, pad_token_id=0)


def test_align_rows_repeats_each_row_for_its_samples():
    batch = DataProto.from_dict(tensors={"x": torch.tensor([[10], [20]])},
                                non_tensors={"uid": np.array(["a", "b"], dtype=object)})
    output = DataProto.from_dict(tensors={"y": torch.tensor([[1], [2], [3]])},
                                 non_tensors={ROLLOUT_ROW_KEY: np.array([0, 0, 1])})
    aligned = align_rows(batch, output).union(output)
    assert aligned.non_tensor_batch["uid"].tolist() == ["a", "a", "b"]
    assert aligned.batch["x"].tolist() == [[10], [10], [20]]
    assert ROLLOUT_ROW_KEY not in aligned.non_tensor_batch
    same = DataProto.from_dict(tensors={"y": torch.tensor([[1], [2]])})
    assert align_rows(batch, same) is batch
