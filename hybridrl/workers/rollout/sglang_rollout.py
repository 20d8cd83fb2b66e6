"""SGLang rollout: the rollout contract on SGLang's offline ``sgl.Engine`` (GPU only; the ``sglang`` extra).

Public API used: ``sgl.Engine(model_path=..., ...)``, ``engine.generate(input_ids=..., sampling_params=...,
return_logprob=...)``, ``engine.update_weights_from_tensor(named_tensors)``,
``engine.get_weights_by_name(name, truncate_size)`` (first k values → ``sample_mode = "prefix"``),
``engine.release_memory_occupation()`` / ``engine.resume_memory_occupation()`` for sleep / wake.
SGLang cannot be installed on the CPU machine; its real test is ``@pytest.mark.gpu``.

Log-probs: ``meta_info.output_token_logprobs`` as SGLang returns them; per SGLang's documentation and tests these are
taken after temperature scaling (``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` gives T = 1 instead), i.e. hybridrl's
definition (``generation/sampling.py``) — not verified here (docs/rollout-correction.md, engine table).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from hybridrl.generation.records import SamplingParams
from hybridrl.workers.rollout.base import BaseRollout
from hybridrl.workers.rollout.hf_rollout import resolve_dtype

_INSTALL_HINT = (
    "rollout.name=sglang needs SGLang (CUDA only): `pip install 'hybridrl[sglang]'` on a GPU machine; "
    "on CPU use actor_rollout_ref.rollout.name=hf"
)


def import_sglang() -> Any:
    try:
        import sglang
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return sglang


def build_engine_kwargs(rollout_config: Any, model_config: Any, *, follows_actor: bool, seed: int) -> dict[str, Any]:
    """``sgl.Engine(**kwargs)`` from the verl rollout keys (+ ``rollout.engine_kwargs.sglang``)."""
    prompt_length, response_length = int(rollout_config.prompt_length), int(rollout_config.response_length)
    load_format = str(rollout_config.load_format or "auto")
    kwargs: dict[str, Any] = {
        "model_path": os.path.expanduser(model_config.get("path")),
        "dtype": str(resolve_dtype(rollout_config.dtype)).replace("torch.", ""),
        "mem_fraction_static": float(rollout_config.gpu_memory_utilization),
        "tp_size": int(rollout_config.tensor_model_parallel_size),
        "context_length": int(rollout_config.get("max_model_len", None) or prompt_length + response_length),
        "load_format": "dummy" if follows_actor and load_format.startswith("dummy") else "auto",
        "trust_remote_code": bool(model_config.trust_remote_code),
        "random_seed": seed,
        "skip_tokenizer_init": False,
        "enable_memory_saver": bool(rollout_config.free_cache_engine),
    }
    extra = rollout_config.get("engine_kwargs") or {}  # the YAML fills it; a hand-built config may lack it
    kwargs.update({k: v for k, v in dict(extra.get("sglang") or {}).items() if v is not None})
    return kwargs


def to_sglang_sampling_params(params: SamplingParams) -> dict[str, Any]:
    """hybridrl ``SamplingParams`` → SGLang's ``sampling_params`` dict (one sample per prompt)."""
    return {
        "n": 1,
        "max_new_tokens": params.max_new_tokens,
        "min_new_tokens": params.min_new_tokens,
        "temperature": 0.0 if params.greedy else params.temperature,
        "top_p": 1.0 if params.greedy else params.top_p,
        "top_k": -1 if params.greedy or params.top_k <= 0 else params.top_k,
        "ignore_eos": params.ignore_eos,
        "stop_token_ids": [] if params.ignore_eos else list(params.eos_token_ids),
        "skip_special_tokens": False,
    }


def parse_output(output: Mapping[str, Any], want_log_probs: bool) -> tuple[list[int], list[float] | None]:
    """One ``engine.generate`` result → response ids (+ their log-probs from ``meta_info``)."""
    ids = list(output.get("output_ids", []))
    if not want_log_probs:
        return ids, None
    # meta_info.output_token_logprobs: [(logprob, token_id, text|None), ...]
    entries = output["meta_info"]["output_token_logprobs"]
    return ids, [float(entry[0]) for entry in entries][: len(ids)]


class SGLangRollout(BaseRollout):
    """The rollout contract on an in-process ``sgl.Engine``."""

    sample_mode = "prefix"

    def __init__(
        self,
        rollout_config: Any,
        model_config: Any,
        *,
        actor_module: Any,
        eos_token_ids: Iterable[int],
        pad_token_id: int,
        seed: int = 0,
        **_: Any,
    ) -> None:
        super().__init__(rollout_config, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
        sglang = import_sglang()
        kwargs = build_engine_kwargs(rollout_config, model_config, follows_actor=actor_module is not None, seed=seed)
        self.engine = sglang.Engine(**kwargs)
        self.weight_dtype = resolve_dtype(kwargs["dtype"])
        self.tp_size = kwargs["tp_size"]
        self.free_cache_engine = kwargs["enable_memory_saver"]
        self._asleep = False

    def _generate_token_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        outputs = self.engine.generate(
            input_ids=prompt_token_ids,
            sampling_params=to_sglang_sampling_params(params),
            return_logprob=params.calculate_log_probs,
        )
        parsed = [parse_output(out, params.calculate_log_probs) for out in outputs]
        responses = [ids for ids, _ in parsed]
        log_probs = [lps for _, lps in parsed] if params.calculate_log_probs else None
        return responses, log_probs  # type: ignore[return-value]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.engine.update_weights_from_tensor(named_tensors=[(n, t.detach()) for n, t in named_tensors])

    def read_weight_samples(self, indices_by_name: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for name, idx in indices_by_name.items():
            if self.tp_size > 1 and "norm" not in name:
                continue  # TP-sharded on the engine side: only replicated norms compare one-to-one
            try:
                values = self.engine.get_weights_by_name(name, truncate_size=int(idx.numel()))
            except Exception:  # noqa: BLE001 - a fused / renamed parameter is simply not checkable
                continue
            out[name] = torch.as_tensor(values, dtype=torch.float32).reshape(-1)[: idx.numel()]
        return out

    def sleep(self) -> None:
        if self.free_cache_engine and not self._asleep:
            self.engine.release_memory_occupation()
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.engine.resume_memory_occupation()
            self._asleep = False
