"""Server-mode rollout on a real Ray worker group: the async policy worker, its hf server and the agent loops.

- single_turn_agent reproduces sync mode's greedy responses for the same prompts;
- a 3-turn conversation (tool messages between model turns, the tiny model's real chat template) keeps exact
  token accounting: response_mask covers the model's tokens only and the engine's log-probs of those tokens equal
  the trainer's (compute_log_prob) within the sync-mode tolerance;
- an actor update marks the engine stale and the next wake_up syncs (and verifies) the new weights.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from uuid import uuid4

import numpy as np
import pytest
import torch

from hybridrl.experimental.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopWorker,
    register,
)
from hybridrl.experimental.agent_loop.trajectory import Trajectory
from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask
from tests.workers.fsdp_workers_testlib import ppo_batch, ppo_config

pytestmark = pytest.mark.slow

PROMPTS = [
    [{"role": "user", "content": "what is 3 plus 4"}],
    [{"role": "system", "content": "you are helpful"}, {"role": "user", "content": "compute 12 times 7"}],
    [{"role": "user", "content": "hello world"}],
    [{"role": "user", "content": "give the sum of 100 and 23 please"}],
]
RESPONSE_LEN = 128  # room for 3 short model turns and two tool turns of the longest template


@register("test_scripted_three_turns")
class ScriptedThreeTurns(AgentLoopBase):
    """Three model turns with a tool message after each of the first two (no tool parsing: a fixed script)."""

    async def run(self, sampling_params, **kwargs):
        chat = ChatTokens(self.tokenizer)
        trajectory = Trajectory(chat.prompt_ids(list(kwargs["raw_prompt"])), self.response_length, with_logprobs=True)
        request_id = uuid4().hex
        for turn in range(3):
            out = await self.server_manager.generate(
                request_id, prompt_ids=trajectory.context_ids, sampling_params={**sampling_params, "max_tokens": 5})
            trajectory.add_model_tokens(out.token_ids, out.log_probs)
            if turn < 2:
                trajectory.add_context_tokens(
                    chat.turn_ids([{"role": "tool", "content": f"result {turn}"}], trajectory.response_ids[-1]))
                trajectory.user_turns += 1
        return trajectory.output(AgentLoopMetrics())


def _config(model_dir: str, *extra: str):
    return ppo_config(
        model_dir, "actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=True",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.prompt_length=128", f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.agent.num_workers=2", "actor_rollout_ref.rollout.calculate_log_probs=True",
        *extra,
    )


@pytest.fixture(scope="module")
def async_group(ray_cluster, tiny_model_dir):
    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.workers.fsdp_workers import AsyncActorRolloutRefWorker

    config = _config(tiny_model_dir)
    pool = RayResourcePool([1], use_gpu=False, max_colocate_count=1, name_prefix="agent_loop_mgr")
    cls = RayClassWithInitArgs(ray_cluster.remote(AsyncActorRolloutRefWorker), config=config.actor_rollout_ref,
                               role="actor_rollout")
    group = RayWorkerGroup(pool, cls, device_name="cpu", worker_env={"HYBRIDRL_DEVICE": "cpu"})
    group.init_model()
    yield config, group
    group.kill()
    pool.release()


def _chat_batch(tokenizer, prompts=PROMPTS) -> DataProto:
    """The RL dataset's layout: chat template → ids, left-padded, plus the raw messages."""
    rows = [tokenizer.encode(tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                             add_special_tokens=False) for m in prompts]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row):] = torch.tensor(row)
        attention_mask[i, width - len(row):] = 1
    raw = np.empty(len(prompts), dtype=object)
    raw[:] = prompts
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask,
                 "position_ids": compute_position_id_with_mask(attention_mask)},
        non_tensors={"raw_prompt": raw}, meta_info={"do_sample": False, "global_steps": 1},
    )


def test_single_turn_agent_reproduces_sync_greedy(async_group, tiny_model_dir):
    from transformers import AutoTokenizer

    config, group = async_group
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    batch = _chat_batch(tokenizer)
    sync_out = group.generate_sequences(batch)
    manager = AgentLoopManager(config, group)
    async_out = manager.generate_sequences(batch.select(non_tensor_batch_keys=["raw_prompt"], deepcopy=True))
    sync_resp = [r[m.bool()].tolist() for r, m in zip(sync_out.batch["responses"], sync_out.batch["attention_mask"][:, -RESPONSE_LEN:])]
    async_resp = [r[m.bool()].tolist() for r, m in zip(async_out.batch["responses"], async_out.batch["response_mask"])]
    assert async_resp == sync_resp
    assert all(len(r) > 0 for r in async_resp)
    assert async_out.non_tensor_batch["__num_turns__"].tolist() == [2, 2, 2, 2]
    assert "agent_loop/generate_sequences/mean" in async_out.meta_info["timing"]


def _chat_template(name: str) -> str | None:
    """The template the agent loop renders with (the server only sees ids, so any ChatML template fits the tiny
    model's vocabulary): the tiny model's own, the Qwen2.5-style tools fixture, or SmolLM2-135M-Instruct's."""
    if name == "tiny":
        return None
    if name == "smollm2":
        folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hybridrl" / "smollm2-135m-instruct"
        if not (folder / "tokenizer_config.json").exists():
            pytest.skip(f"SmolLM2 not prepared at {folder}: scripts/test.sh runs examples/quickstart/prepare_model.py")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder)).chat_template
    return (Path(__file__).parents[2] / "fixtures" / "chat_templates" / name).read_text()


@pytest.mark.parametrize("template", ["tiny", "qwen2_5_hermes_tools.jinja", "smollm2"])
def test_three_turn_token_accounting_and_log_probs(async_group, template):
    config, group = async_group
    ray_handles = group.workers
    worker = AgentLoopWorker(config, ray_handles)  # in this process, so the scripted loop above is registered
    chat_template = _chat_template(template)
    if chat_template is not None:
        worker.tokenizer.chat_template = chat_template
    batch = _chat_batch(worker.tokenizer)
    batch.non_tensor_batch["agent_name"] = np.array(["test_scripted_three_turns"] * len(batch), dtype=object)
    batch.meta_info = {"global_steps": 2}  # sampling at rollout.temperature = 1.0
    ray_cluster_get = __import__("ray").get
    ray_cluster_get([h.wake_up.remote() for h in ray_handles])
    try:
        out = asyncio.run(worker.generate_sequences(batch.select(non_tensor_batch_keys=["raw_prompt", "agent_name"])))
    finally:
        ray_cluster_get([h.sleep.remote() for h in ray_handles])
    mask = out.batch["response_mask"]
    attention = out.batch["attention_mask"][:, -RESPONSE_LEN:]
    assert out.non_tensor_batch["__num_turns__"].tolist() == [6, 6, 6, 6]  # 3 assistant + 2 tool + 1
    for row in range(len(out)):
        model_tokens = int(mask[row].sum())
        assert 3 <= model_tokens <= 15  # 1..5 generated tokens in each of 3 turns
        assert int(attention[row].sum()) > model_tokens  # the tool messages' tokens are there, masked out
    out.meta_info["temperature"] = float(config.actor_rollout_ref.rollout.temperature)
    trainer_log_probs = group.compute_log_prob(out).batch["old_log_probs"]
    keep = mask.bool()
    torch.testing.assert_close(out.batch["rollout_log_probs"][keep], trainer_log_probs[keep], atol=1e-4, rtol=1e-4)


def test_wake_up_syncs_weights_after_an_update(async_group):
    config, group = async_group
    group.update_actor(ppo_batch(4))
    manager = AgentLoopManager(config, group)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    out = manager.generate_sequences(_chat_batch(tokenizer).select(non_tensor_batch_keys=["raw_prompt"]))
    assert out.meta_info["metrics"]["rollout/weight_sync_verified_tensors"] > 0
    assert out.meta_info["timing"]["weight_sync"] > 0
