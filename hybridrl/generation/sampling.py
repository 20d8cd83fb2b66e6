"""Resolve the sampling parameters of one ``generate_sequences`` call.

Precedence (verl 0.5's vLLM rollout, plus the per-call overrides verl's HF rollout accepts):

1. ``rollout.*`` config, given to the engine at construction: ``temperature``, ``top_k``, ``top_p``,
   ``do_sample``, ``response_length``, ``ignore_eos``, ``calculate_log_probs``, ``min_tokens`` (no stop id
   before that many tokens; not in verl's YAML, but verl's vLLM rollout forwards every rollout key that
   ``vllm.SamplingParams`` has, so verl users add it with ``+actor_rollout_ref.rollout.min_tokens=N``);
2. ``meta_info`` per-call overrides: ``do_sample``, ``validate`` (what the trainer varies per call), and for
   external verl-style callers ``temperature``, ``top_k``, ``top_p``, ``response_length``, ``n``,
   ``ignore_eos``, ``eos_token_id``, ``pad_token_id`` (the trainer does not need them);
3. ``meta_info["validate"]`` → ``rollout.val_kwargs`` (``top_k``, ``top_p``, ``temperature``, ``n``,
   ``do_sample``);
4. ``do_sample=False`` (from meta_info, or val_kwargs when validating) → greedy: temperature 0,
   top_k off, top_p 1, n 1.

``n``: verl 0.5's trainer repeats the batch ``rollout.n`` times *before* calling the rollout, so a
training call generates one sample per row; ``n`` comes only from ``meta_info["n"]`` (or val_kwargs.n
when validating) and the rollout then repeats each prompt row ``n`` times (interleaved).

Rollout log-probs (``rollout_log_probs [B, R]``) are defined as::

    log p(token_t) = log_softmax(logits_t / T_lp)[token_t],  T_lp = temperature if sampling else 1

computed on the *unfiltered* distribution (no top-k / top-p truncation). That is exactly what the
actor's ``compute_log_prob`` returns at the same temperature (logits / temperature, full softmax), so
the two are comparable token by token (``training/rollout_probs_diff_*``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

_GREEDY_TEMPERATURE = 0.0
_RESPONSES_PER_ROW = 1  # the trainer repeats rows rollout.n times before the call (verl 0.5)


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


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    getter = getattr(cfg, "get", None)
    return getter(key, default) if callable(getter) else getattr(cfg, key, default)


def _as_id_tuple(ids: Any) -> tuple[int, ...]:
    if ids is None:
        return ()
    if isinstance(ids, int):
        return (int(ids),)
    return tuple(int(i) for i in ids)


def collect_eos_token_ids(tokenizer: Any = None, generation_config: Any = None, extra: Any = None) -> tuple[int, ...]:
    """Union (order-preserving) of the tokenizer's EOS id, ``generation_config.eos_token_id`` and ``extra``."""
    found: list[int] = []
    sources: Iterable[Any] = (
        extra,
        _get(tokenizer, "eos_token_id") if tokenizer is not None else None,
        _get(generation_config, "eos_token_id") if generation_config is not None else None,
    )
    for source in sources:
        for token_id in _as_id_tuple(source):
            if token_id not in found:
                found.append(token_id)
    return tuple(found)


def resolve_sampling_params(
    rollout_config: Any,
    meta_info: Mapping[str, Any] | None,
    *,
    eos_token_ids: Iterable[int],
    pad_token_id: int,
) -> SamplingParams:
    """Sampling parameters for one call (see the module docstring for the precedence).

    Args:
        rollout_config: the ``actor_rollout_ref.rollout`` section with every YAML key (the engine's, from construction).
        meta_info: the ``DataProto.meta_info`` of the prompts.
        eos_token_ids: the default stop ids (tokenizer + generation_config); ``meta_info["eos_token_id"]``
            ids are added to them.
        pad_token_id: default pad id; ``meta_info["pad_token_id"]`` wins.
    """
    meta = dict(meta_info or {})
    eos = collect_eos_token_ids(extra=meta.get("eos_token_id"))
    eos = eos + tuple(i for i in eos_token_ids if i not in eos)
    if not eos:
        raise ValueError("no EOS token id: the tokenizer has no eos_token_id and meta_info has no 'eos_token_id'")
    pad = meta.get("pad_token_id", pad_token_id)
    params = SamplingParams(
        temperature=float(_per_call(meta, "temperature", rollout_config.temperature)),
        top_k=int(_per_call(meta, "top_k", rollout_config.top_k)),
        top_p=float(_per_call(meta, "top_p", rollout_config.top_p)),
        do_sample=bool(rollout_config.do_sample),
        max_new_tokens=int(_per_call(meta, "response_length", rollout_config.response_length)),
        n=int(_per_call(meta, "n", _RESPONSES_PER_ROW)),
        ignore_eos=bool(_per_call(meta, "ignore_eos", rollout_config.ignore_eos)),
        eos_token_ids=eos,
        pad_token_id=int(pad if pad is not None else eos[0]),
        calculate_log_probs=bool(rollout_config.calculate_log_probs),
        min_new_tokens=_min_tokens(rollout_config),
    )
    if meta.get("validate", False):
        params = _apply_val_kwargs(params, rollout_config.val_kwargs, meta)
    if not _per_call(meta, "do_sample", params.do_sample):
        params = replace(params, do_sample=False)
    if not params.do_sample:
        params = replace(params, temperature=_GREEDY_TEMPERATURE, top_k=-1, top_p=1.0, n=1)
    _check(params)
    return params


def _per_call(meta: Mapping[str, Any], key: str, configured: Any) -> Any:
    """``meta_info[key]`` when the caller overrides it for this call, else the configured value."""
    return meta[key] if key in meta else configured


def _min_tokens(rollout_config: Any) -> int:
    """``rollout.min_tokens``, checked to be a non-negative int."""
    value = rollout_config.min_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"actor_rollout_ref.rollout.min_tokens must be an int >= 0, got {value!r}")
    return value


def _apply_val_kwargs(params: SamplingParams, val_kwargs: Any, meta: Mapping[str, Any]) -> SamplingParams:
    """``validate=True``: ``rollout.val_kwargs`` replace the training sampling keys."""
    return replace(
        params,
        temperature=float(val_kwargs.temperature),
        top_k=int(val_kwargs.top_k),
        top_p=float(val_kwargs.top_p),
        do_sample=bool(val_kwargs.do_sample),
        n=int(_per_call(meta, "n", _RESPONSES_PER_ROW)),  # the trainer repeats rows val_kwargs.n times itself (verl 0.5)
    )


def _check(params: SamplingParams) -> None:
    if params.max_new_tokens <= 0:
        raise ValueError(f"rollout.response_length must be > 0, got {params.max_new_tokens}")
    if params.min_new_tokens > params.max_new_tokens:
        raise ValueError(
            f"actor_rollout_ref.rollout.min_tokens={params.min_new_tokens} exceeds the response length "
            f"{params.max_new_tokens} (data.max_response_length): lower min_tokens or raise the response length"
        )
    if params.n < 1:
        raise ValueError(f"rollout n must be >= 1, got {params.n}")
    if params.do_sample and params.temperature < 0:
        raise ValueError(f"rollout.temperature must be >= 0, got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise ValueError(f"rollout.top_p must be in (0, 1], got {params.top_p}")
