"""Training samples from the completions one trajectory made through the OpenAI-compatible endpoint.

The endpoint records every completion of a trajectory (``prompt_ids``, ``response_ids``, ``response_logprobs``)
in call order. Completions form *chains*: a completion continues the chain when its prompt starts with the
chain's last prompt + response (the endpoint splices the model's exact tokens back when a client replays the
conversation, so a well-behaved multi-turn agent is one chain). Each chain becomes one sample::

    prompt   = the chain's first prompt
    response = completion 1 (mask 1) | tokens the client added before completion 2 (mask 0) | completion 2 | ...

A trajectory that starts a fresh conversation part-way (a new system prompt, a summary, a sub-agent) gives one
sample per chain; all of a trajectory's samples share its reward. The reward is a float (placed on the last
model token of every sample) or one float per completion, in call order (placed on that completion's last token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

__all__ = ["Chain", "chain_completions", "samples_from_completions"]


@dataclass
class Chain:
    """One sample under construction: its prompt and the response built so far (see the module docstring)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)  # response index of each completion's last token
    completions: list[int] = field(default_factory=list)  # call-order index of each completion in the chain

    @property
    def full_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def extend(self, index: int, prompt_ids: list[int], response_ids: list[int], logprobs: list[float]) -> None:
        gap = prompt_ids[len(self.full_ids):]  # what the client added since the last completion (tool results, ...)
        self.response_ids += gap + response_ids
        self.response_mask += [0] * len(gap) + [1] * len(response_ids)
        self.response_logprobs += [0.0] * len(gap) + list(logprobs)
        if response_ids:
            self.turn_ends.append(len(self.response_ids) - 1)
            self.completions.append(index)


def _logprobs(record: Any) -> list[float]:
    values = getattr(record, "response_logprobs", None)
    return list(values) if values is not None else [0.0] * len(record.response_ids)


def chain_completions(records: Sequence[Any]) -> list[Chain]:
    """Group completions (objects with ``prompt_ids``, ``response_ids``, ``response_logprobs``) into chains."""
    chains: list[Chain] = []
    for index, record in enumerate(records):
        prompt, response = list(record.prompt_ids), list(record.response_ids)
        target = next((c for c in reversed(chains) if prompt[: len(c.full_ids)] == c.full_ids), None)
        if target is None:
            target = Chain(prompt_ids=prompt)
            chains.append(target)
        target.extend(index, prompt, response, _logprobs(record))
    return chains


def _turn_rewards(reward: Any, num_completions: int) -> list[float] | None:
    """Per-completion rewards when ``reward`` is a sequence; None for a single trajectory reward."""
    if isinstance(reward, (int, float)):
        return None
    values = [float(r) for r in reward]
    if len(values) != num_completions:
        raise ValueError(f"the rollout function returned {len(values)} per-turn rewards for {num_completions} "
                         "completions; return one float, or one per completion in call order")
    return values


def samples_from_completions(records: Sequence[Any], reward: Any, *, response_length: int,
                             metrics: AgentLoopMetrics) -> list[AgentLoopOutput]:
    """One ``AgentLoopOutput`` per chain, each cut to ``response_length``, with ``reward_scores`` (per response
    position) in its ``extra_fields``; [] when the trajectory made no completion."""
    chains = [c for c in chain_completions(records) if c.turn_ends]
    per_turn = _turn_rewards(reward, len(records))
    outputs = []
    for chain in chains:
        cut = min(len(chain.response_ids), response_length)
        scores: dict[int, float] = {}
        if per_turn is None:
            last = max(i for i in range(cut) if chain.response_mask[i] == 1)
            scores[last] = float(reward)
        else:
            for end, completion in zip(chain.turn_ends, chain.completions):
                position = min(end, cut - 1)
                scores[position] = scores.get(position, 0.0) + per_turn[completion]
        outputs.append(AgentLoopOutput(
            prompt_ids=chain.prompt_ids, response_ids=chain.response_ids[:cut], response_mask=chain.response_mask[:cut],
            response_logprobs=chain.response_logprobs[:cut], num_turns=2 * len(chain.turn_ends),
            metrics=metrics, extra_fields={"reward_scores": scores},
        ))
    metrics.count("samples", len(outputs))
    return outputs
