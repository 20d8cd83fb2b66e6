"""Hugging Face rollout: generation on a plain (unsharded) copy of the actor's weights.

Two decoders share one engine class:

- ``rollout.name=hf`` (``HFRollout``): hybridrl's EOS-aware KV-cache loop (``decoding.decode_batch``):
  it stops when every row is done, drops finished rows from the cache, writes keys/values into a
  preallocated cache (:mod:`hybridrl.models.transformers.preallocated_cache`); the default on CPU.
- ``rollout.name=hf_generate`` (``HFGenerateRollout``): ``transformers.generate``, verl's HF rollout
  and the reference the fast loop is checked against.

Both run in micro-batches of ``rollout.micro_batch_size`` prompts (whole batch when unset) and hold
their own model (``rollout.enable_rollout_routing_replay``: plus each token's MoE routing, ``routing_record.py``):
the worker marks the weights stale after each actor update and the hybrid-engine
handle pushes the actor's full state dict through ``update_weights``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from hybridrl.generation.records import SamplingParams
from hybridrl.models.multimodal import concat_vision_inputs, vision_language_auto_class
from hybridrl.protocol import DataProto
from hybridrl.workers.rollout.base import BaseRollout
from hybridrl.workers.rollout.decoding import DecodeOptions, decode_batch
from hybridrl.workers.rollout.routing_record import ROUTED_EXPERTS_KEY, record_routed_experts


def left_pad(rows: list[list[int]], pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged prompt lists → left-padded ``input_ids [B, P]`` and ``attention_mask [B, P]``."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, width - len(row) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def _step_seed(seed: int, step: int, validate: int, gen_batch_index: int = 0) -> int:
    # Distinct streams per (rank seed, step, train/val, generation batch); the multipliers keep streams apart.
    return (seed * 1_000_003 + step * 2 + validate + gen_batch_index * 7_919_000_003) % (2**63 - 1)


class HFRollout(BaseRollout):
    """Rollout on a Hugging Face causal LM with hybridrl's fast decode loop.

    Args:
        model: the engine's own model (not the FSDP-wrapped actor); put in eval mode here.
        rollout_config: ``actor_rollout_ref.rollout``.
        eos_token_ids: stop ids (tokenizer EOS ∪ ``generation_config.eos_token_id``).
        pad_token_id: pad id for responses.
        seed: seed of the sampling RNG (per rank: pass ``seed + rank`` for independent samples).
    """

    def __init__(
        self, model: nn.Module, rollout_config: Any, *, eos_token_ids: Iterable[int], pad_token_id: int, seed: int = 0
    ) -> None:
        super().__init__(rollout_config, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self._home_device = self.device
        self.weight_dtype = next(model.parameters()).dtype
        self.image_token_id = getattr(model.config, "image_token_id", None)
        self.seed = seed
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._params = dict(model.named_parameters(remove_duplicate=False))
        self.decode_options = DecodeOptions()  # the decode loop's optimisations (the benchmark's "before" turns them off)

    # ---- generation ------------------------------------------------------------------------

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sampling is a pure function of (seed + rank, ``global_steps``) when the trainer passes the step,
        so a resumed run draws exactly the samples an uninterrupted run would (no RNG state to checkpoint)."""
        step = prompts.meta_info.get("global_steps")
        if step is not None:
            validate = 1 if prompts.meta_info.get("validate", False) else 0
            # several generation batches in one step (DAPO dynamic sampling) each get their own stream
            gen_batch_index = int(prompts.meta_info.get("gen_batch_index", 0))
            self.generator.manual_seed(_step_seed(self.seed, int(step), validate, gen_batch_index))
        output = super().generate_sequences(prompts)
        if self.rollout_config.get("enable_rollout_routing_replay"):
            batch = output.batch
            batch[ROUTED_EXPERTS_KEY] = record_routed_experts(
                self.model, batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device),
                batch["position_ids"].to(self.device), self.rollout_config.get("micro_batch_size", None),
            ).to(batch["input_ids"].device)
        return output

    def _micro_batches(self, rows: list[list[int]]) -> list[list[list[int]]]:
        size = self.rollout_config.get("micro_batch_size", None) or len(rows)
        return [rows[i : i + size] for i in range(0, len(rows), size)]

    def _generate_token_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        responses: list[list[int]] = []
        log_probs: list[list[float]] = []
        for rows in self._micro_batches(prompt_token_ids):
            input_ids, attention_mask = left_pad(rows, params.pad_token_id, self.device)
            out_ids, out_logps = self._decode(input_ids, attention_mask, params)
            responses.extend(out_ids)
            log_probs.extend(out_logps)
        return responses, (log_probs if params.calculate_log_probs else None)

    def _generate_token_ids_with_images(
        self, prompt_token_ids: list[list[int]], vision_rows: list[Any], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """Prompts with images: ``transformers.generate`` per micro-batch with its rows' vision inputs (Qwen-VL
        ``pixel_values`` / ``image_grid_thw``, from which the model computes its mrope positions; Idefics3
        ``pixel_values`` / ``pixel_attention_mask``), sampling seeded from the
        engine's generator (so a fixed seed and step give the same samples). The image and video placeholder ids are
        never sampled (a response holding one would meet no image features in the training forward: transformers'
        "image features and image tokens do not match"); the log-probs stay those of the unmodified logits."""
        responses: list[list[int]] = []
        log_probs: list[list[float]] = []
        size = self.rollout_config.get("micro_batch_size", None) or len(prompt_token_ids)
        for start in range(0, len(prompt_token_ids), size):
            input_ids, attention_mask = left_pad(prompt_token_ids[start : start + size], params.pad_token_id,
                                                 self.device)
            vision = {k: v.to(self.device) for k, v in concat_vision_inputs(vision_rows[start : start + size]).items()}
            seed = int(torch.randint(2**62, (1,), generator=self.generator, device=self.device))
            with torch.random.fork_rng(devices=[] if self.device.type == "cpu" else [self.device]):
                torch.manual_seed(seed)
                out_ids, out_logps = hf_generate(self.model, input_ids, attention_mask, params,
                                                 suppress_tokens=self._vision_placeholder_ids(), **vision)
            responses.extend(out_ids)
            log_probs.extend(out_logps)
        return responses, (log_probs if params.calculate_log_probs else None)

    def _vision_placeholder_ids(self) -> list[int]:
        config = self.model.config
        return [int(i) for i in (getattr(config, "image_token_id", None), getattr(config, "video_token_id", None))
                if i is not None]

    def _decode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, params: SamplingParams):
        result = decode_batch(self.model, input_ids, attention_mask, params, self.generator, self.decode_options)
        return result.token_ids, result.log_probs

    # ---- weights -----------------------------------------------------------------------------

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy full tensors into the engine model (cast to its dtype/device); unknown names raise."""
        for name, tensor in named_tensors:
            param = self._params.get(name)
            if param is None:
                raise KeyError(
                    f"rollout weight sync: the engine model has no parameter {name!r}; the trainer and the "
                    f"rollout must be built from the same model (actor_rollout_ref.model.path)"
                )
            if param.shape != tensor.shape:
                raise ValueError(
                    f"rollout weight sync: {name} has shape {list(tensor.shape)} in the trainer "
                    f"but {list(param.shape)} in the rollout engine"
                )
            param.copy_(tensor.to(device=param.device, dtype=param.dtype))

    @torch.no_grad()
    def read_weight_samples(self, indices_by_name: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for name, indices in indices_by_name.items():
            param = self._params.get(name)
            if param is not None:
                out[name] = param.detach().reshape(-1)[indices.to(param.device)].float().cpu()
        return out

    def sleep(self) -> None:
        """On an accelerator, park the weights on the host while the actor trains (no-op on CPU)."""
        if self._home_device.type != "cpu":
            self.model.to("cpu")
            self.device = torch.device("cpu")

    def wake(self) -> None:
        if self.device != self._home_device:
            self.model.to(self._home_device)
            self.device = self._home_device


class HFGenerateRollout(HFRollout):
    """verl's HF rollout: ``transformers.generate`` (the reference for the fast loop)."""

    def _decode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, params: SamplingParams):
        return hf_generate(self.model, input_ids, attention_mask, params)


def hf_generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, params: SamplingParams,
                **generate_kwargs: Any) -> tuple[list[list[int]], list[list[float]]]:
    """``transformers.generate`` on left-padded prompts (+ ``generate_kwargs``: a VLM's ``pixel_values`` ...) →
    each row's response ids up to its first EOS and their log-probs at ``params.logprob_temperature``."""
    kwargs: dict[str, Any] = {"do_sample": not params.greedy, "max_new_tokens": params.max_new_tokens}
    if params.min_new_tokens > 0:  # a processor of its own: generate's min_new_tokens needs eos_token_id set
        from transformers import LogitsProcessorList, MinNewTokensLengthLogitsProcessor

        kwargs["logits_processor"] = LogitsProcessorList([MinNewTokensLengthLogitsProcessor(
            input_ids.shape[1], params.min_new_tokens, list(params.eos_token_ids), device=str(input_ids.device))])
    if not params.greedy:
        kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=max(params.top_k, 0))
    eos = None if params.ignore_eos else list(params.eos_token_ids)
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        eos_token_id=eos,
        pad_token_id=params.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
        use_cache=True,
        **kwargs,
        **generate_kwargs,
    )
    generated = out.sequences[:, input_ids.shape[1] :]
    logits = torch.stack(out.logits, dim=1).float() / params.logprob_temperature  # [B, r, V]
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    return _strip_after_eos(generated, log_probs, params)


def _strip_after_eos(generated: torch.Tensor, log_probs: torch.Tensor, params: SamplingParams):
    """``generate`` pads finished rows with pad ids: keep each row up to its first EOS."""
    ids, logps = generated.tolist(), log_probs.tolist()
    if params.ignore_eos:
        return ids, logps
    eos = set(params.eos_token_ids)
    for i, row in enumerate(ids):
        end = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
        ids[i], logps[i] = row[:end], logps[i][:end]
    return ids, logps


def resolve_dtype(name: Any) -> torch.dtype:
    """``rollout.dtype`` string (``bfloat16``, ``bf16``, ``float32``, ``fp32``, ``float16``) → torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    aliases = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "half": "float16", "float": "float32"}
    dtype = getattr(torch, aliases.get(str(name), str(name)), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"actor_rollout_ref.rollout.dtype={name!r} is not a torch dtype (use bfloat16 or float32)")
    return dtype


def build_hf_engine_model(
    rollout_config: Any, model_config: Any, *, hf_config: Any, actor_module: Any, device_name: str, **_: Any
) -> nn.Module:
    """The engine's own unsharded model in ``rollout.dtype`` on ``device_name``.

    Following an actor: built from ``hf_config`` (weights arrive with the first sync, like verl's
    ``load_format=dummy``). Standalone (no actor): loaded from ``model.path``.
    """
    import os

    from transformers import AutoConfig

    dtype = resolve_dtype(rollout_config.dtype)
    trust = bool(model_config.trust_remote_code)
    if actor_module is None:
        path = os.path.expanduser(model_config.get("path"))
        auto_class = vision_language_auto_class(AutoConfig.from_pretrained(path, trust_remote_code=trust))
        model = auto_class.from_pretrained(path, dtype=dtype, trust_remote_code=trust)
    else:
        model = vision_language_auto_class(hf_config).from_config(hf_config, dtype=dtype, trust_remote_code=trust)
    device = torch.device("cuda", torch.cuda.current_device()) if device_name == "cuda" else torch.device(device_name)
    return model.to(device).eval()
