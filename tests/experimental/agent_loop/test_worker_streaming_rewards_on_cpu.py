"""Streaming rewards: with reward workers given, the agent-loop worker scores each sample as soon as its loop
ends, so a fast sample's reward arrives while a slow one is still generating; the reward loop then takes the
streamed rewards instead of scoring the batch again."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import torch

from hybridrl.experimental.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopWorker, register
from hybridrl.experimental.agent_loop.agent_loop import AgentLoopOutput
from hybridrl.experimental.reward_loop.reward_loop import (
    STREAMED_REWARD_KEY,
    RewardLoopManager,
    RewardLoopWorker,
)
from hybridrl.protocol import DataProto
from tests.workers.fsdp_workers_testlib import ppo_config

SCORES_PY = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": float(ground_truth), "scored_at": time.monotonic()}
"""


@register("test_sleepy_loop")
class SleepyLoop(AgentLoopBase):
    """No model: waits the row's ``delay`` seconds and answers with two fixed tokens."""

    async def run(self, sampling_params, **kwargs):
        await asyncio.sleep(kwargs["extra_info"]["delay"])
        return AgentLoopOutput([1, 2], [3, 4], [1, 1], None, num_turns=2, metrics=AgentLoopMetrics())


class InProcessHandle:
    """A Ray actor handle's shape (``handle.compute_score.remote(data)`` awaitable) over a worker in this process."""

    def __init__(self, worker: RewardLoopWorker) -> None:
        self.compute_score = SimpleNamespace(remote=worker.compute_score)


def test_a_sample_is_scored_before_the_batch_ends(tmp_path, tiny_model_dir):
    scores = tmp_path / "scores.py"
    scores.write_text(SCORES_PY)
    config = ppo_config(
        tiny_model_dir, "actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=True",
        f"custom_reward_function.path={scores}", "reward.num_workers=1",
        "actor_rollout_ref.rollout.prompt_length=8", "actor_rollout_ref.rollout.response_length=4",
    )
    reward_worker = RewardLoopWorker(config)
    unused_server = object()  # the sleepy loop never generates
    worker = AgentLoopWorker(config, [unused_server], reward_loop_worker_handles=[InProcessHandle(reward_worker)])
    delays = [0.0, 1.5]  # the first loop ends at once, the second 1.5 s later
    batch = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(2, 1, dtype=torch.long)},
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": "q"}]] * 2, dtype=object),
            "agent_name": np.array(["test_sleepy_loop"] * 2, dtype=object),
            "data_source": np.array(["judge", "judge"], dtype=object),
            "reward_model": np.array([{"ground_truth": "0.25"}, {"ground_truth": "0.75"}], dtype=object),
            "extra_info": np.array([{"delay": d} for d in delays], dtype=object),
        },
        meta_info={"global_steps": 1},
    )
    batch = batch.select(non_tensor_batch_keys=list(batch.non_tensor_batch))
    start = time.monotonic()
    out = asyncio.run(worker.generate_sequences(batch))
    ended = time.monotonic()
    streamed = out.non_tensor_batch[STREAMED_REWARD_KEY]
    assert [s["reward_score"] for s in streamed] == [0.25, 0.75]
    fast_scored = streamed[0]["reward_extra_info"]["scored_at"]
    assert fast_scored - start < 1.0 and ended - start >= 1.5  # scored while the slow loop still ran
    assert streamed[1]["reward_extra_info"]["scored_at"] - start >= 1.5

    # the reward stage takes the streamed rewards (no reward worker is started for them)
    manager = RewardLoopManager(config)
    result = manager(out, return_dict=True)
    assert manager.reward_loop_workers == []
    assert result["reward_tensor"].sum(-1).tolist() == [0.25, 0.75]
    assert result["reward_tensor"][:, 1].tolist() == [0.25, 0.75]  # on the last of the 2 response tokens
    assert result["reward_extra_info"]["judge_error"] == [False, False]
