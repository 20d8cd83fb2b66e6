"""The records of generation: the sampling settings, one token-in/token-out request, and what comes back.

    sampling_params dict (the wire form: ``REQUEST_KEYS``)  ──resolve_sampling──►  RequestParams  ──engine──►  TokenOutput
    rollout config + DataProto.meta_info (sync rollout)     ──resolve_sampling──►  RequestParams.sampling

``SamplingParams`` and ``RequestParams`` are built only by ``sampling.resolve_sampling``; engines read them, never a
raw dict. Its optional
fields (multimodal inputs, routed-expert records, a policy version) are carried for the engines that will use them;
no engine reads them yet, and None keeps today's behaviour.

Shapes: ``P`` prompt tokens, ``T`` generated tokens, ``L`` MoE layers, ``k`` experts per token (router top-k),
``H, W, C`` image height, width, channels, ``F`` video frames.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "META_INFO_KEY", "REQUEST_KEYS", "STOP_REASONS", "RequestParams", "SamplingParams", "TokenOutput", "check_prompt_ids",
]  # fmt: skip

META_INFO_KEY = "meta_info"  # the call's layer inside a request dict (``sampling.CALL_LAYER_KEYS``)
REQUEST_KEYS = (
    "max_tokens", "temperature", "top_p", "top_k", "logprobs", "seed", "ignore_eos", "min_tokens", "stop_token_ids",
    META_INFO_KEY,
)  # fmt: skip
STOP_REASONS = ("stop", "length", "aborted")


@dataclass(frozen=True)
class SamplingParams:
    """Engine-neutral sampling parameters (top_k <= 0 and top_p >= 1 mean "off")."""

    temperature: float
    top_k: int
    top_p: float
    do_sample: bool
    max_new_tokens: int  # R: responses are padded/truncated to exactly this length
    n: int
    ignore_eos: bool
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    calculate_log_probs: bool
    min_new_tokens: int = 0  # no stop id may be sampled before this many tokens (vLLM's ``min_tokens``)

    @property
    def greedy(self) -> bool:
        return (not self.do_sample) or self.temperature <= 0.0

    @property
    def logprob_temperature(self) -> float:
        """Temperature of the distribution ``rollout_log_probs`` are taken under (1 when greedy)."""
        return 1.0 if self.greedy else float(self.temperature)


@dataclass(frozen=True)
class TokenOutput:
    """What the server returns for one request.

    Attributes:
        token_ids: ``[T]`` generated ids (EOS included when hit), ``T <= max_tokens``.
        log_probs: ``[T]`` one per token (``log_softmax(logits / T_lp)[token]``, see ``sampling.py``) when the
            request asked for ``logprobs``, else None.
        stop_reason: ``"stop"`` (an EOS id), ``"length"`` (``max_tokens``) or ``"aborted"``.
        routed_experts: ``[T, L, k]`` int expert ids the router picked for each generated token (MoE routing
            replay: the trainer routes the same tokens through the same experts), or None (dense model / not
            recorded).
        policy_version: the weights version that generated the tokens (the trainer's step of the last weight
            sync), or None when the engine does not track it.
    """

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str
    routed_experts: Any | None = None
    policy_version: int | None = None


@dataclass(frozen=True)
class RequestParams:
    """One request, resolved (built by ``sampling.resolve_sampling`` only).

    Attributes:
        sampling: the effective sampling settings; ``sampling.max_new_tokens`` is the request's ``max_tokens``.
        seed: None: the engine's shared RNG; an int makes the request's samples independent of batch composition.
        multi_modal_data: the prompt's non-text inputs, vLLM's layout: ``{"image": [N_img x (PIL image or uint8
            [H, W, C])], "video": [N_vid x uint8 [F, H, W, C]]}`` (their placeholder tokens are in the prompt ids),
            or None for a text-only prompt.
        routed_experts: ``[P, L, k]`` int expert ids to route the prompt tokens through (replaying the routing an
            earlier turn recorded, ``TokenOutput.routed_experts``), or None to route freely.
        policy_version: the weights version the caller requires (an engine holding another version refuses the
            request), or None for whatever the engine holds.
    """

    sampling: SamplingParams
    seed: int | None = None
    multi_modal_data: dict[str, list[Any]] | None = None
    routed_experts: Any | None = None
    policy_version: int | None = None


def check_prompt_ids(prompt_ids: Any) -> list[int]:
    """A non-empty list of ints (token ids), else a ValueError naming ``prompt_ids``."""
    error = ValueError(f"prompt_ids must be a non-empty list of token ids (ints >= 0), got {str(prompt_ids)[:80]}")
    try:
        ids = [operator.index(i) for i in prompt_ids if not isinstance(i, bool)]
    except TypeError:
        raise error from None
    if not ids or len(ids) != len(prompt_ids) or min(ids) < 0:
        raise error
    return ids
