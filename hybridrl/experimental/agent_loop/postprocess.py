"""Agent-loop outputs → the rollout batch every estimator, loss and metric already reads (verl's layout).

Shapes (B trajectories, P = ``rollout.prompt_length``, R = ``rollout.response_length``)::

    prompts            [B, P]    left-padded prompt ids
    responses          [B, R]    model + tool/user tokens, right-padded
    response_mask      [B, R]    1 on the model's tokens only
    input_ids          [B, P+R]  cat(prompts, responses)
    attention_mask     [B, P+R]  1 on every real token (tool tokens included), 0 on padding
    position_ids       [B, P+R]  cumsum(attention_mask) - 1, clamped at 0
    rollout_log_probs  [B, R]    engine log-probs (0 on tool tokens, -1 on padding), when requested

    rm_scores          [B, R]    rewards the loops gave themselves (``extra_fields["reward_scores"]``), if any

Non-tensor columns: the input rows' columns, ``__num_turns__`` and every other key of the outputs' ``extra_fields``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopOutput
from hybridrl.protocol import DataProto
from hybridrl.workers.rollout.output import ROLLOUT_LOG_PROB_PAD

__all__ = ["REWARD_SCORES_KEY", "agent_metrics", "outputs_to_batch"]

REWARD_SCORES_KEY = "reward_scores"  # extra field of a loop that scores its own trajectory: {response position: reward}


def _left_pad(rows: Sequence[Sequence[int]], width: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
            mask[i, width - len(row):] = 1
    return ids, mask


def _right_pad(rows: Sequence[Sequence[float]], width: int, pad: float, dtype: torch.dtype) -> torch.Tensor:
    out = torch.full((len(rows), width), pad, dtype=dtype)
    for i, row in enumerate(rows):
        row = list(row)[:width]
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def _check_prompt_lengths(outputs: Sequence[AgentLoopOutput], prompt_length: int) -> None:
    longest = max(len(o.prompt_ids) for o in outputs)
    if longest > prompt_length:
        raise ValueError(
            f"an agent loop's prompt has {longest} tokens > actor_rollout_ref.rollout.prompt_length="
            f"{prompt_length} (data.max_prompt_length): the agent loop renders the chat template itself (with the "
            "tool schemas, the template's default system prompt, ...), which can be longer than the dataset's "
            "prompt; raise data.max_prompt_length"
        )


def _reward_scores(outputs: Sequence[AgentLoopOutput], response_length: int) -> torch.Tensor | None:
    """``rm_scores [B, R]`` from the loops' own rewards (``extra_fields["reward_scores"]``: response position →
    reward); the reward managers then use them instead of the reward function (verl's ``rm_scores`` short-cut)."""
    given = [REWARD_SCORES_KEY in o.extra_fields for o in outputs]
    if not any(given):
        return None
    if not all(given):
        raise ValueError("some agent loops of this batch scored their trajectories (reward_scores) and others did not; "
                         "one batch must be scored one way: give every row the same kind of agent loop")
    scores = torch.zeros((len(outputs), response_length), dtype=torch.float32)
    for i, output in enumerate(outputs):
        for position, value in output.extra_fields[REWARD_SCORES_KEY].items():
            scores[i, int(position)] += float(value)
    return scores


def outputs_to_batch(outputs: Sequence[AgentLoopOutput], *, prompt_length: int, response_length: int,
                     pad_token_id: int, input_non_tensors: dict[str, np.ndarray] | None = None) -> DataProto:
    """The batch of ``outputs`` (one row each, in order); see the module docstring for the keys."""
    _check_prompt_lengths(outputs, prompt_length)
    prompts, prompt_mask = _left_pad([o.prompt_ids for o in outputs], prompt_length, pad_token_id)
    responses = _right_pad([o.response_ids for o in outputs], response_length, pad_token_id, torch.long)
    response_mask = _right_pad([o.response_mask for o in outputs], response_length, 0, torch.long)
    response_attention = _right_pad([[1] * len(o.response_ids) for o in outputs], response_length, 0, torch.long)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=-1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
    }
    scores = _reward_scores(outputs, response_length)
    if scores is not None:
        tensors["rm_scores"] = scores
    if all(o.response_logprobs is not None for o in outputs):
        tensors["rollout_log_probs"] = _right_pad(
            [o.response_logprobs for o in outputs], response_length, ROLLOUT_LOG_PROB_PAD, torch.float32
        )
    non_tensors = {key: np.asarray(value, dtype=object) for key, value in (input_non_tensors or {}).items()}
    non_tensors["__num_turns__"] = np.array([o.num_turns for o in outputs], dtype=np.int32)
    for key in sorted({k for o in outputs for k in o.extra_fields} - {REWARD_SCORES_KEY}):
        column = np.empty(len(outputs), dtype=object)
        column[:] = [o.extra_fields.get(key) for o in outputs]
        non_tensors[key] = column
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def agent_metrics(outputs: Sequence[AgentLoopOutput]) -> dict[str, Any]:
    """Per-trajectory values for ``reduce_metrics`` (lists; the trainer logs their mean):

    ``agent_loop/<counter>`` (tool_calls, tool_errors, parse_failures, ...), ``agent_loop/tool_call_rate`` (1 when
    the trajectory made at least one well-formed call; only when a loop counts ``tool_calls``), ``tool/<name>/<stat>`` (calls, errors, seconds and the
    tool's own numeric metrics, per trajectory)."""
    metrics: dict[str, list[float]] = {}
    counter_keys = sorted({k for o in outputs for k in o.metrics.counters})
    for key in counter_keys:
        metrics[f"agent_loop/{key}"] = [o.metrics.counters.get(key, 0.0) for o in outputs]
    if "tool_calls" in counter_keys:  # loops that run tools themselves (tool_agent); not the user's openai agent
        metrics["agent_loop/tool_call_rate"] = [float(o.metrics.counters.get("tool_calls", 0.0) > 0) for o in outputs]
    tool_names = sorted({name for o in outputs for name in o.metrics.tools})
    for name in tool_names:
        stat_keys = sorted({k for o in outputs for k in o.metrics.tools.get(name, {})})
        for stat in stat_keys:
            metrics[f"tool/{name}/{stat}"] = [o.metrics.tools.get(name, {}).get(stat, 0.0) for o in outputs]
    return metrics
