"""The growing token record of one conversation (token-in / token-out bookkeeping for agent loops).

    prompt_ids ─┬─ model turn 1 (mask 1, engine log-probs) ─ tool/user/template tokens (mask 0) ─ model turn 2 ─ …
                └───────────────────────────── response_ids / response_mask / response_logprobs ─────────────┘

Model tokens are appended exactly as the engine returned them; the rest comes from ``ChatTokens.turn_ids``
(only the new messages are tokenized). ``remaining`` is what is left of ``rollout.response_length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

__all__ = ["Trajectory"]

CONTEXT_TOKEN_LOGPROB = 0.0  # log-prob slot of tool/user/template tokens (masked out; verl fills 0 too)


@dataclass
class Trajectory:
    """Token record of one conversation.

    Attributes:
        prompt_ids: ``[P]`` the first generation's prompt.
        response_length: the budget of response tokens (``rollout.response_length``).
        with_logprobs: keep the engine's log-probs (``rollout.calculate_log_probs``).
    """

    prompt_ids: list[int]
    response_length: int
    with_logprobs: bool = False
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0

    @property
    def context_ids(self) -> list[int]:
        """Everything so far: the prompt of the next generation."""
        return self.prompt_ids + self.response_ids

    @property
    def remaining(self) -> int:
        return self.response_length - len(self.response_ids)

    def add_model_tokens(self, token_ids: list[int], log_probs: list[float] | None) -> None:
        """Append one generation verbatim (mask 1)."""
        if self.with_logprobs:
            if log_probs is None or len(log_probs) != len(token_ids):
                raise ValueError(
                    "the rollout server returned no (or misaligned) log-probs although rollout.calculate_log_probs "
                    f"is on: {0 if log_probs is None else len(log_probs)} log-probs for {len(token_ids)} tokens"
                )
            self.response_logprobs.extend(float(x) for x in log_probs)
        self.response_ids.extend(int(t) for t in token_ids)
        self.response_mask.extend([1] * len(token_ids))
        self.assistant_turns += 1

    def add_context_tokens(self, token_ids: list[int]) -> None:
        """Append tool / user / template tokens (mask 0)."""
        self.response_ids.extend(int(t) for t in token_ids)
        self.response_mask.extend([0] * len(token_ids))
        if self.with_logprobs:
            self.response_logprobs.extend([CONTEXT_TOKEN_LOGPROB] * len(token_ids))

    def fits(self, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more context tokens leave room for another generation (verl's check)."""
        return len(self.response_ids) + num_tokens < self.response_length

    def output(self, metrics: AgentLoopMetrics, extra_fields: dict | None = None) -> AgentLoopOutput:
        """The trajectory cut to ``response_length``; ``num_turns`` = user + assistant turns + 1 (verl)."""
        cut = self.response_length
        metrics.count("assistant_turns", self.assistant_turns)
        metrics.count("user_turns", self.user_turns)
        return AgentLoopOutput(
            prompt_ids=list(self.prompt_ids),
            response_ids=self.response_ids[:cut],
            response_mask=self.response_mask[:cut],
            response_logprobs=self.response_logprobs[:cut] if self.with_logprobs else None,
            num_turns=self.user_turns + self.assistant_turns + 1,
            metrics=metrics,
            extra_fields=dict(extra_fields or {}),
        )
