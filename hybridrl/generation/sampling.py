"""The one resolver of sampling settings: every generation path asks ``resolve_sampling`` and nothing else.

Layers, later ones win (each optional but the first)::

    1. rollout config   actor_rollout_ref.rollout: temperature, top_k, top_p, do_sample, response_length,
                        ignore_eos, calculate_log_probs, min_tokens (vLLM's; verl users add it with
                        +actor_rollout_ref.rollout.min_tokens=N)
    2. the call         DataProto.meta_info: temperature, top_k, top_p, response_length, n, ignore_eos,
                        eos_token_id, pad_token_id (external verl-style callers of the sync rollout); a request
                        carries only the part the trainer varies per call, CALL_LAYER_KEYS (validate, do_sample)
    3. the request      a server request's dict (records.REQUEST_KEYS): max_tokens (required, clamped to the
                        response length), temperature (names one: samples iff > 0), top_p, top_k, logprobs, seed,
                        ignore_eos, min_tokens (at most max_tokens; the configured one is clamped to it),
                        stop_token_ids (added to the stop ids);
                        type-checked, errors name the key
    4. validation       meta_info["validate"] → rollout.val_kwargs (temperature, top_k, top_p, do_sample)
    5. greedy           meta_info["do_sample"] False (ReMax's baseline), a do_sample that ends False, or a request
                        whose temperature ends at 0 → temperature 0, top_k off, top_p 1, n 1

Who passes which layers: the sync rollout (``workers/rollout/base.py``) 1+2; a server request (async server, the
OpenAI endpoint) 1+3, and an agent-loop request 1+3 with its call's layer inside the request (``call_layer``), so
the agent loop resolves nothing itself: the server's ``resolve_sampling`` produces the final settings once.

``n``: verl 0.5's trainer repeats the batch ``rollout.n`` times *before* calling the rollout, so a training call
generates one sample per row; ``n`` comes only from ``meta_info["n"]`` (a server request is always 1).

Rollout log-probs (``rollout_log_probs [B, R]``) are defined as::

    log p(token_t) = log_softmax(logits_t / T_lp)[token_t],  T_lp = temperature if sampling else 1

computed on the *unfiltered* distribution (no top-k / top-p truncation). That is exactly what the actor's
``compute_log_prob`` returns at the same temperature (logits / temperature, full softmax), so the two are
comparable token by token (``training/rollout_probs_diff_*``).

Per trajectory of an agent loop, a ``seed`` that is a pure function of (``rollout.seed``, step, train/val,
generation batch, row): a trajectory samples the same tokens whoever shares the server's batch with it, and a
resumed run samples what an uninterrupted one would (``trajectory_seed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hybridrl.generation.records import META_INFO_KEY, REQUEST_KEYS, RequestParams, SamplingParams

__all__ = [
    "CALL_LAYER_KEYS",
    "call_layer",
    "call_sampling_params",
    "collect_eos_token_ids",
    "resolve_request_params",
    "resolve_sampling",
    "resolve_sampling_params",
    "trajectory_seed",
]

CALL_LAYER_KEYS = ("validate", "do_sample")  # the meta_info keys the trainer varies per call
_RESPONSES_PER_ROW = 1  # the trainer repeats rows rollout.n times before the call (verl 0.5)
_SEED_MODULUS = 2**63 - 1


# ---------------------------------------------------------------------------- the resolver


def resolve_sampling(
    rollout_config: Any,
    *,
    meta_info: Mapping[str, Any] | None = None,
    request: Mapping[str, Any] | None = None,
    eos_token_ids: Iterable[int],
    pad_token_id: int | None,
) -> RequestParams:
    """The effective settings of one call (sync rollout) or one request (servers); see the module docstring.

    Args:
        rollout_config: the ``actor_rollout_ref.rollout`` section with every YAML key.
        meta_info: the call's ``DataProto.meta_info`` (sync rollout).
        request: a server request's dict (keys in ``REQUEST_KEYS``; ``meta_info``: its call's layer).
        eos_token_ids: the engine's stop ids (tokenizer + generation_config); ``meta_info["eos_token_id"]`` adds some.
        pad_token_id: the engine's pad id (``meta_info["pad_token_id"]`` wins; None: the first stop id).

    Raises:
        KeyError: a request without ``max_tokens``. ValueError: an unknown key, a value of the wrong type or range
            (the message names the key), no stop id.
    """
    call = dict(meta_info or {})
    if request is not None:
        _check_request_keys(request)
        call.update(_request_call_layer(request.get(META_INFO_KEY)))
    eos = _stop_ids(call, eos_token_ids, server=request is not None)
    if request is not None:
        eos += tuple(i for i in _request_stop_ids(request) if i not in eos)
    pad = _per_call(call, "pad_token_id", pad_token_id)
    values = {
        "temperature": float(_per_call(call, "temperature", rollout_config.temperature)),
        "top_k": int(_per_call(call, "top_k", rollout_config.top_k)),
        "top_p": float(_per_call(call, "top_p", rollout_config.top_p)),
        "do_sample": bool(rollout_config.do_sample),
        "max_new_tokens": int(_per_call(call, "response_length", rollout_config.response_length)),
        "n": int(_per_call(call, "n", _RESPONSES_PER_ROW)),
        "ignore_eos": bool(_per_call(call, "ignore_eos", rollout_config.ignore_eos)),
        "calculate_log_probs": bool(rollout_config.calculate_log_probs),
        "min_new_tokens": _configured_min_tokens(rollout_config),
    }
    if request is not None:
        values.update(_request_layer(request, values))
    if call.get("validate", False):
        val_kwargs = rollout_config.val_kwargs
        values.update(
            temperature=float(val_kwargs.temperature),
            top_k=int(val_kwargs.top_k),
            top_p=float(val_kwargs.top_p),
            do_sample=bool(val_kwargs.do_sample),
        )
    if "do_sample" in call and not call["do_sample"]:  # the caller asks for greedy (ReMax's baseline)
        values["do_sample"] = False
    if request is not None and values["temperature"] <= 0.0:  # a request samples iff its temperature is > 0
        values["do_sample"] = False
    if not values["do_sample"]:
        values.update(temperature=0.0, top_k=-1, top_p=1.0, n=1)
    sampling = SamplingParams(eos_token_ids=eos, pad_token_id=int(pad if pad is not None else eos[0]), **values)
    _check(sampling)
    return RequestParams(sampling=sampling, seed=None if request is None else _seed(request))


# ---------------------------------------------------------------------------- what the callers hold


def resolve_sampling_params(
    rollout_config: Any, meta_info: Mapping[str, Any] | None, *, eos_token_ids: Iterable[int], pad_token_id: int
) -> SamplingParams:
    """The settings of one sync ``generate_sequences`` call (layers 1, 2, 4, 5)."""
    return resolve_sampling(
        rollout_config, meta_info=meta_info, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id
    ).sampling


def resolve_request_params(
    sampling_params: Mapping[str, Any], rollout_config: Any, *, eos_token_ids: Iterable[int], pad_token_id: int
) -> RequestParams:
    """The settings of one server request (layers 1, 3, and 4, 5 when the request carries its call's layer)."""
    return resolve_sampling(
        rollout_config, request=sampling_params, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id
    )


def call_layer(meta_info: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a call's ``meta_info`` its server requests carry (``CALL_LAYER_KEYS``)."""
    return {key: meta_info[key] for key in CALL_LAYER_KEYS if key in meta_info}


def call_sampling_params(rollout_config: Any, meta_info: Mapping[str, Any]) -> dict[str, Any]:
    """What one agent-loop call's requests sample with (``temperature``, ``top_p``, ``top_k``, ``logprobs``), as the
    server will resolve them: a view for loops and logs (the requests carry ``call_layer(meta_info)``, not these)."""
    params = resolve_sampling(
        rollout_config,
        request={"max_tokens": 1, META_INFO_KEY: call_layer(meta_info)},
        eos_token_ids=(0,),  # stop ids are not part of the view
        pad_token_id=0,
    ).sampling
    return {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "logprobs": params.calculate_log_probs,
    }


# ---------------------------------------------------------------------------- seeds and stop ids


def trajectory_seed(base_seed: int, meta_info: Mapping[str, Any], row: int) -> int:
    """Seed of agent-loop trajectory ``row`` (its position in the step's generation batch)."""
    step = int(meta_info.get("global_steps", 0) or 0)
    validate = int(bool(meta_info.get("validate", False)))
    gen_batch = int(meta_info.get("gen_batch_index", 0) or 0)
    value = (((int(base_seed) * 1_000_003 + step) * 2 + validate) * 7_919 + gen_batch) * 104_729 + int(row)
    return value % _SEED_MODULUS


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


# ---------------------------------------------------------------------------- layers 2 and 3


def _per_call(layer: Mapping[str, Any], key: str, current: Any) -> Any:
    """``layer[key]`` when the layer sets it, else the value so far."""
    return layer[key] if key in layer else current


def _stop_ids(call: Mapping[str, Any], eos_token_ids: Iterable[int], server: bool) -> tuple[int, ...]:
    """``meta_info["eos_token_id"]`` ids first, then the engine's (each once)."""
    eos = collect_eos_token_ids(extra=call.get("eos_token_id"))
    eos = eos + tuple(int(i) for i in eos_token_ids if int(i) not in eos)
    if not eos and server:
        raise ValueError("the rollout engine has no eos_token_ids: the server cannot stop requests")
    if not eos:
        raise ValueError("no EOS token id: the tokenizer has no eos_token_id and meta_info has no 'eos_token_id'")
    return eos


def _configured_min_tokens(rollout_config: Any) -> int:
    """``rollout.min_tokens``, checked to be a non-negative int."""
    value = rollout_config.min_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"actor_rollout_ref.rollout.min_tokens must be an int >= 0, got {value!r}")
    return value


def _bad(key: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"sampling_params[{key!r}]={value!r}: expected {expected}")


def _check_request_keys(request: Mapping[str, Any]) -> None:
    unknown = sorted(set(request) - set(REQUEST_KEYS))
    if unknown:
        raise ValueError(f"sampling_params has unknown keys {unknown}; accepted keys: {list(REQUEST_KEYS)}")


def _request_stop_ids(request: Mapping[str, Any]) -> tuple[int, ...]:
    """A request's ``stop_token_ids`` (verl's name): more ids that end the request as a stop, e.g. a tool-call
    format's closing token."""
    ids = request.get("stop_token_ids")
    if ids is None:
        return ()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise _bad("stop_token_ids", ids, "a list of token ids")
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
        raise _bad("stop_token_ids", ids, "a list of token ids (ints >= 0)")
    return tuple(ids)


def _request_call_layer(layer: Any) -> dict[str, Any]:
    """A request's ``meta_info``: its call's layer, only ``CALL_LAYER_KEYS``."""
    if layer is None:
        return {}
    if not isinstance(layer, Mapping) or set(layer) - set(CALL_LAYER_KEYS):
        raise _bad(META_INFO_KEY, layer, f"a dict with keys among {list(CALL_LAYER_KEYS)} (the call's layer)")
    return dict(layer)


def _number(request: Mapping[str, Any], key: str, kind: type, current: Any) -> Any:
    value = request.get(key)
    if value is None:
        return kind(current)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not float(value).is_integer())
    ):
        raise _bad(key, value, "an int" if kind is int else "a number")
    return kind(value)


def _flag(request: Mapping[str, Any], key: str, current: Any) -> bool:
    value = request.get(key)
    if value is None:
        return bool(current)
    if not isinstance(value, (bool, int)):
        raise _bad(key, value, "a bool")
    return bool(value)


def _max_tokens(request: Mapping[str, Any], response_length: int) -> int:
    if request.get("max_tokens") is None:
        raise KeyError("sampling_params['max_tokens'] is required (the number of tokens this turn may generate)")
    value = _number(request, "max_tokens", int, None)
    if value < 1:
        raise _bad("max_tokens", value, "an int >= 1")
    return min(value, int(response_length))


def _min_tokens(request: Mapping[str, Any], configured: int, max_new_tokens: int) -> int:
    """The request's ``min_tokens`` (at most its ``max_tokens``), else the configured one clamped to it."""
    if request.get("min_tokens") is None:
        return min(int(configured), max_new_tokens)
    value = _number(request, "min_tokens", int, None)
    if not 0 <= value <= max_new_tokens:
        raise _bad("min_tokens", value, f"an int in [0, max_tokens={max_new_tokens}]")
    return value


def _seed(request: Mapping[str, Any]) -> int | None:
    value = request.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad("seed", value, "an int or None")
    return int(value)


def _request_layer(request: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """Layer 3: the request's values over ``current`` (layers 1-2), type-checked and clamped (the checks run in the
    order of the request's fields, so a request with several bad values names the same one first, whoever asks)."""
    temperature = _number(request, "temperature", float, current["temperature"])
    max_new_tokens = _max_tokens(request, current["max_new_tokens"])
    values = {
        "top_k": _number(request, "top_k", int, current["top_k"]),
        "top_p": _number(request, "top_p", float, current["top_p"]),
        "max_new_tokens": max_new_tokens,
        "n": 1,
        "ignore_eos": _flag(request, "ignore_eos", current["ignore_eos"]),
        "calculate_log_probs": _flag(request, "logprobs", current["calculate_log_probs"]),
        "min_new_tokens": _min_tokens(request, current["min_new_tokens"], max_new_tokens),
    }
    if request.get("temperature") is not None:  # a request that names a temperature samples iff it is > 0
        if temperature < 0:
            raise _bad("temperature", temperature, "a float >= 0 (0 = greedy)")
        values.update(temperature=temperature, do_sample=temperature > 0.0)
    if request.get("top_p") is not None and not 0.0 < values["top_p"] <= 1.0:
        raise _bad("top_p", values["top_p"], "a float in (0, 1]")
    return values


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
