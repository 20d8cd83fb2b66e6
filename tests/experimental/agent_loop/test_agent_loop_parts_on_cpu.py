"""The agent loop's pure parts: server routing, trajectory bookkeeping, batch layout, sampling, registry."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from hybridrl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    load_agent_loop_config,
    register,
    resolve_agent_loop,
)
from hybridrl.experimental.agent_loop.postprocess import agent_metrics, outputs_to_batch
from hybridrl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from hybridrl.experimental.agent_loop.tool_session import truncate_tool_response
from hybridrl.experimental.agent_loop.trajectory import Trajectory
from hybridrl.generation.sampling import call_sampling_params, trajectory_seed
from tests.config_testlib import compose_section


class _Remote:
    def __init__(self, server: _FakeServer) -> None:
        self.server = server

    def remote(self, **kwargs):
        return self.server.serve(**kwargs)


class _FakeServer:
    """A server handle whose ``generate.remote`` is awaitable and records who asked (unit test of the router)."""

    def __init__(self, name: str) -> None:
        self.name, self.seen = name, []
        self.generate = _Remote(self)

    async def serve(self, request_id, prompt_ids, sampling_params):
        self.seen.append(request_id)
        await asyncio.sleep(0.01)
        return self.name


def test_router_keeps_a_conversation_on_one_server_and_balances_new_ones():
    servers = [_FakeServer("a"), _FakeServer("b")]
    manager = AsyncLLMServerManager(servers)

    async def play():
        # four conversations start at once: the least-loaded rule spreads them 2/2
        first = await asyncio.gather(*(manager.generate(f"c{i}", prompt_ids=[1], sampling_params={}) for i in range(4)))
        # their second turns go back to the same servers
        second = await asyncio.gather(*(manager.generate(f"c{i}", prompt_ids=[1, 2], sampling_params={}) for i in range(4)))
        return first, second

    first, second = asyncio.run(play())
    assert first == second
    assert sorted(first) == ["a", "a", "b", "b"]
    assert manager.in_flight == [0, 0]


def test_router_forgets_the_oldest_conversation_beyond_its_cache():
    manager = AsyncLLMServerManager([_FakeServer("a"), _FakeServer("b")], max_cache_size=2)
    for request in ("x", "y", "z"):
        manager.choose_server(request)
    assert list(manager._sticky) == ["y", "z"]


def test_trajectory_masks_model_tokens_and_budgets():
    trajectory = Trajectory([5, 6], response_length=8, with_logprobs=True)
    trajectory.add_model_tokens([10, 11, 2], [-0.1, -0.2, -0.3])
    assert trajectory.fits(4) and not trajectory.fits(5)  # 3 + 5 = 8 leaves no room to generate
    trajectory.add_context_tokens([7, 8])
    trajectory.user_turns += 1
    trajectory.add_model_tokens([12, 2], [-0.4, -0.5])
    assert trajectory.context_ids == [5, 6, 10, 11, 2, 7, 8, 12, 2]
    assert trajectory.remaining == 1
    output = trajectory.output(AgentLoopMetrics())
    assert output.response_mask == [1, 1, 1, 0, 0, 1, 1]
    assert output.response_logprobs == pytest.approx([-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5])
    assert output.num_turns == 4  # 2 assistant + 1 user + 1 (verl's count)
    assert output.metrics.counters == {"assistant_turns": 2.0, "user_turns": 1.0}


def test_trajectory_refuses_missing_logprobs():
    with pytest.raises(ValueError, match="calculate_log_probs"):
        Trajectory([1], 4, with_logprobs=True).add_model_tokens([3], None)


def test_output_rejects_misaligned_mask():
    with pytest.raises(ValueError, match="align"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2, 3], response_mask=[1])


def test_outputs_to_batch_layout():
    metrics = AgentLoopMetrics()
    metrics.count("tool_calls", 2)
    metrics.record_tool("calculator", 0.5, error=False, extra={"latency": 3})
    outputs = [
        AgentLoopOutput([1, 2], [3, 4, 5], [1, 0, 1], [-0.5, 0.0, -0.25], num_turns=3, metrics=metrics,
                        extra_fields={"tool_rewards": [1.0]}),
        AgentLoopOutput([9], [8], [1], [-1.5], num_turns=2),
    ]
    batch = outputs_to_batch(outputs, prompt_length=3, response_length=4, pad_token_id=0,
                             input_non_tensors={"data_source": np.array(["a", "b"], dtype=object)})
    assert batch.batch["prompts"].tolist() == [[0, 1, 2], [0, 0, 9]]
    assert batch.batch["responses"].tolist() == [[3, 4, 5, 0], [8, 0, 0, 0]]
    assert batch.batch["response_mask"].tolist() == [[1, 0, 1, 0], [1, 0, 0, 0]]
    assert batch.batch["attention_mask"].tolist() == [[0, 1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0, 0]]
    assert batch.batch["position_ids"].tolist() == [[0, 0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 1, 1, 1]]
    assert batch.batch["input_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 0], [0, 0, 9, 8, 0, 0, 0]]
    torch.testing.assert_close(batch.batch["rollout_log_probs"],
                               torch.tensor([[-0.5, 0.0, -0.25, -1.0], [-1.5, -1.0, -1.0, -1.0]]))
    assert batch.non_tensor_batch["__num_turns__"].tolist() == [3, 2]
    assert batch.non_tensor_batch["tool_rewards"].tolist() == [[1.0], None]
    assert batch.non_tensor_batch["data_source"].tolist() == ["a", "b"]
    reduced = agent_metrics(outputs)
    assert reduced["agent_loop/tool_calls"] == [2.0, 0.0]
    assert reduced["agent_loop/tool_call_rate"] == [1.0, 0.0]
    assert reduced["tool/calculator/calls"] == [1.0, 0.0]
    assert reduced["tool/calculator/latency"] == [3.0, 0.0]


def test_outputs_to_batch_names_the_key_when_the_prompt_is_too_long():
    with pytest.raises(ValueError, match="data.max_prompt_length"):
        outputs_to_batch([AgentLoopOutput([1, 2, 3, 4], [5], [1])], prompt_length=3, response_length=2, pad_token_id=0)


def test_sampling_params_train_validation_and_greedy():
    rollout = compose_section("actor_rollout_ref.rollout", temperature=0.7, top_p=0.9, calculate_log_probs=True,
                              val_kwargs__temperature=0.3, val_kwargs__do_sample=True)
    assert call_sampling_params(rollout, {}) == {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "logprobs": True}
    assert call_sampling_params(rollout, {"validate": True})["temperature"] == pytest.approx(0.3)
    greedy = call_sampling_params(rollout, {"do_sample": False})
    assert (greedy["temperature"], greedy["top_p"], greedy["top_k"]) == (0.0, 1.0, -1)


def test_trajectory_seeds_are_distinct_and_reproducible():
    meta = {"global_steps": 3, "validate": False, "gen_batch_index": 0}
    seeds = [trajectory_seed(0, meta, row) for row in range(64)]
    assert len(set(seeds)) == 64
    assert seeds == [trajectory_seed(0, dict(meta), row) for row in range(64)]
    assert trajectory_seed(0, {**meta, "global_steps": 4}, 0) not in seeds
    assert trajectory_seed(0, {**meta, "validate": True}, 0) != seeds[0]


def test_truncate_tool_response_sides():
    text = "0123456789"
    assert truncate_tool_response(text, 20, "middle") == text
    assert truncate_tool_response(text, 4, "right") == "0123...(truncated)"
    assert truncate_tool_response(text, 4, "left") == "(truncated)...6789"
    assert truncate_tool_response(text, 4, "middle") == "01...(truncated)89"
    with pytest.raises(ValueError, match="tool_response_truncate_side"):
        truncate_tool_response(text, 4, "top")


@register("test_echo_agent")
class _EchoLoop(AgentLoopBase):
    async def run(self, sampling_params, **kwargs):
        return AgentLoopOutput([1], [2], [1])


def test_registry_by_decorator_and_by_yaml(tmp_path):
    assert resolve_agent_loop("test_echo_agent") is _EchoLoop
    config = tmp_path / "loops.yaml"
    config.write_text(f"- name: echo_from_yaml\n  _target_: {__name__}._EchoLoop\n")
    assert load_agent_loop_config(str(config)) == ["echo_from_yaml"]
    assert resolve_agent_loop("echo_from_yaml") is _EchoLoop
    with pytest.raises(KeyError, match="not registered"):
        resolve_agent_loop("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: x\n")
    with pytest.raises(ValueError, match="_target_"):
        load_agent_loop_config(str(bad))
