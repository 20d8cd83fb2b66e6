"""One server request: the caller's sampling-params dict → engine-neutral parameters, and the result type.

The dict keys (fixed by the agent-loop interface): ``max_tokens`` (int, required), ``temperature``,
``top_p``, ``top_k``, ``logprobs`` (bool), ``seed`` (int | None), ``ignore_eos``, ``min_tokens`` (int, no stop id
before that many tokens, as vLLM's). A key left out takes the ``actor_rollout_ref.rollout`` value (``temperature``,
``top_p``, ``top_k``, ``calculate_log_probs``, ``ignore_eos``, ``min_tokens``; ``rollout.do_sample=False`` means
greedy unless the request names a temperature). ``max_tokens`` is clamped to ``rollout.response_length``, the
configured ``min_tokens`` to the request's ``max_tokens`` (a request's own ``min_tokens`` above it is an error). Greedy = temperature 0. ``val_kwargs`` are the
caller's business. Stop ids are the engine's ``eos_token_ids``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hybridrl.generation.sampling import SamplingParams

REQUEST_KEYS = ("max_tokens", "temperature", "top_p", "top_k", "logprobs", "seed", "ignore_eos", "min_tokens")
STOP_REASONS = ("stop", "length", "aborted")


@dataclass(frozen=True)
class TokenOutput:
    """What the server returns for one request.

    Attributes:
        token_ids: generated ids (EOS included when hit), ``len <= max_tokens``.
        log_probs: one per token (``log_softmax(logits / T_lp)[token]``, see ``sampling.py``) when the request
            asked for ``logprobs``, else None.
        stop_reason: ``"stop"`` (an EOS id), ``"length"`` (``max_tokens``) or ``"aborted"``.
    """

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str


@dataclass(frozen=True)
class RequestParams:
    """Resolved parameters of one request: ``sampling.max_new_tokens`` is its ``max_tokens``;
    ``seed`` (None: the engine's shared RNG) makes its samples independent of batch composition."""

    sampling: SamplingParams
    seed: int | None


def _bad(key: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"sampling_params[{key!r}]={value!r}: expected {expected}")


def _number(params: Mapping[str, Any], key: str, kind: type, configured: Any) -> Any:
    value = params.get(key)
    if value is None:
        return kind(configured)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not float(value).is_integer())
    ):
        raise _bad(key, value, "an int" if kind is int else "a number")
    return kind(value)


def _flag(params: Mapping[str, Any], key: str, configured: Any) -> bool:
    value = params.get(key)
    if value is None:
        return bool(configured)
    if not isinstance(value, (bool, int)):
        raise _bad(key, value, "a bool")
    return bool(value)


def _max_tokens(params: Mapping[str, Any], response_length: int) -> int:
    if params.get("max_tokens") is None:
        raise KeyError("sampling_params['max_tokens'] is required (the number of tokens this turn may generate)")
    value = _number(params, "max_tokens", int, None)
    if value < 1:
        raise _bad("max_tokens", value, "an int >= 1")
    return min(value, int(response_length))


def _min_tokens(params: Mapping[str, Any], configured: int, max_new_tokens: int) -> int:
    """The request's ``min_tokens`` (at most its ``max_tokens``), else the configured one clamped to it."""
    if params.get("min_tokens") is None:
        return min(int(configured), max_new_tokens)
    value = _number(params, "min_tokens", int, None)
    if not 0 <= value <= max_new_tokens:
        raise _bad("min_tokens", value, f"an int in [0, max_tokens={max_new_tokens}]")
    return value


def _seed(params: Mapping[str, Any]) -> int | None:
    value = params.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad("seed", value, "an int or None")
    return int(value)


def resolve_request_params(
    sampling_params: Mapping[str, Any], rollout_config: Any, *, eos_token_ids: Iterable[int], pad_token_id: int
) -> RequestParams:
    """The caller's dict (keys in ``REQUEST_KEYS``) + the rollout section → ``RequestParams``.

    Raises:
        KeyError: ``max_tokens`` missing; ValueError: an unknown key or a value of the wrong type/range.
    """
    unknown = sorted(set(sampling_params) - set(REQUEST_KEYS))
    if unknown:
        raise ValueError(f"sampling_params has unknown keys {unknown}; accepted keys: {list(REQUEST_KEYS)}")
    eos = tuple(int(i) for i in eos_token_ids)
    if not eos:
        raise ValueError("the rollout engine has no eos_token_ids: the server cannot stop requests")
    temperature = _number(sampling_params, "temperature", float, rollout_config.temperature)
    if sampling_params.get("temperature") is None and not bool(rollout_config.do_sample):
        temperature = 0.0
    max_new_tokens = _max_tokens(sampling_params, rollout_config.response_length)
    params = SamplingParams(
        temperature=temperature,
        top_k=_number(sampling_params, "top_k", int, rollout_config.top_k),
        top_p=_number(sampling_params, "top_p", float, rollout_config.top_p),
        do_sample=temperature > 0.0,
        max_new_tokens=max_new_tokens,
        n=1,
        ignore_eos=_flag(sampling_params, "ignore_eos", rollout_config.ignore_eos),
        eos_token_ids=eos,
        pad_token_id=int(pad_token_id),
        calculate_log_probs=_flag(sampling_params, "logprobs", rollout_config.calculate_log_probs),
        min_new_tokens=_min_tokens(sampling_params, rollout_config.min_tokens, max_new_tokens),
    )
    if temperature < 0:
        raise _bad("temperature", temperature, "a float >= 0 (0 = greedy)")
    if not 0.0 < params.top_p <= 1.0:
        raise _bad("top_p", params.top_p, "a float in (0, 1]")
    if params.greedy:
        params = replace(params, temperature=0.0, top_k=-1, top_p=1.0)
    return RequestParams(sampling=params, seed=_seed(sampling_params))


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
