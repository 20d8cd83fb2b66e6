"""The rollout engine interface every backend (hf, vllm, sglang) implements.

An engine turns left-padded prompts into verl's rollout batch (see ``output.py``) and follows the
trainer's weights through ``update_weights``. In the hybrid engine the worker wraps it with
``hybridrl.workers.sharding_manager.RolloutHandle``: wake → sync weights (if stale) → verify →
generate → sleep.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from hybridrl.generation.records import SamplingParams
from hybridrl.generation.sampling import resolve_sampling
from hybridrl.models.image_fingerprint import FINGERPRINT_KEY, fingerprints
from hybridrl.models.multimodal import MULTI_MODAL_INPUTS_KEY, has_images
from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import remove_pad_token
from hybridrl.workers.rollout.output import build_rollout_tensors, pad_log_probs, pad_responses

_PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")


class LoRAAdapterRejected(RuntimeError):
    """An engine with its own LoRA path refused the actor's adapter (``load_lora_adapter``); the hybrid-engine
    handle then falls back to merged weights."""


class BaseRollout(ABC):
    """A generation engine that holds its own copy of the policy weights.

    Subclasses implement ``_generate_token_ids`` (ragged token lists in, ragged lists out); this base
    resolves sampling parameters, repeats rows for ``n``, pads, builds masks/positions and timing.

    Attributes:
        rollout_config: the ``actor_rollout_ref.rollout`` section.
        eos_token_ids: default stop ids (tokenizer EOS ∪ generation_config EOS).
        pad_token_id: default pad id.
        weight_dtype: dtype the engine stores its weights in (the sync verification casts to it).
        sample_mode: how ``read_weight_samples`` indexes tensors: ``"strided"`` (any index set) or
            ``"prefix"`` (only the first k elements; SGLang's ``get_weights_by_name``).
    """

    sample_mode: str = "strided"
    weight_dtype: torch.dtype = torch.float32
    image_token_id: int | None = None  # a vision-language model's image placeholder id (the image fingerprints)

    def __init__(self, rollout_config: Any, *, eos_token_ids: Iterable[int], pad_token_id: int) -> None:
        self.rollout_config = rollout_config
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.pad_token_id = int(pad_token_id)

    # ---- engine primitives -------------------------------------------------------------------

    @abstractmethod
    def _generate_token_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """Generate one response per prompt (no padding in or out; EOS kept when hit).

        Returns the response ids and, when ``params.calculate_log_probs``, their log-probs (else None).
        """

    def _generate_token_ids_with_images(
        self, prompt_token_ids: list[list[int]], vision_rows: list[Any], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """As ``_generate_token_ids`` for prompts whose rows carry images (``vision_rows``: each row's
        ``multi_modal_inputs``, see ``hybridrl/models/multimodal.py``); engines that take images override it."""
        raise NotImplementedError(
            f"rollout.name={self.rollout_config.get('name')!r} does not pass images to the model yet: prompts with "
            "images need actor_rollout_ref.rollout.name=hf (or hf_generate)"
        )

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load full (unsharded) tensors named as the HF model's ``state_dict()`` keys."""

    @abstractmethod
    def read_weight_samples(self, indices_by_name: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Engine-side values ``flat(param)[indices]`` (float32) for the names it holds with HF names.

        Names the engine cannot map one-to-one (fused or TP-sharded parameters) are left out.
        """

    def sleep(self) -> None:
        """Release memory while training runs (KV cache and, where supported, weights); default: keep it."""
        return None

    def wake(self) -> None:
        """Re-acquire what ``sleep`` released; default: nothing was released."""
        return None

    # ---- the rollout contract ----------------------------------------------------------------

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """verl's rollout: left-padded ``input_ids/attention_mask/position_ids [B, P]`` → rollout batch.

        Output ``[B*n, ...]``: ``prompts``, ``responses [.., R]``, ``input_ids/attention_mask/position_ids
        [.., P+R]``, ``rollout_log_probs [.., R]`` when ``rollout.calculate_log_probs``, and
        ``meta_info["timing"]["generate_sequences"]`` (seconds). Non-tensor columns are repeated with rows.
        """
        start = time.perf_counter()
        params = resolve_sampling(
            self.rollout_config,
            meta_info=prompts.meta_info,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
        ).sampling
        missing = [k for k in _PROMPT_KEYS if k not in prompts.batch.keys()]
        if missing:
            raise KeyError(f"rollout input is missing {missing}; expected left-padded {list(_PROMPT_KEYS)} [B, P]")
        if params.n > 1:
            prompts = prompts.repeat(repeat_times=params.n, interleave=True)
        input_ids = prompts.batch["input_ids"]
        attention_mask = prompts.batch["attention_mask"]
        prompt_lists = remove_pad_token(input_ids, attention_mask)
        vision_rows = prompts.non_tensor_batch.get(MULTI_MODAL_INPUTS_KEY)
        non_tensors = dict(prompts.non_tensor_batch)
        if has_images(vision_rows):  # + what the model was shown, for the training side's check
            non_tensors[FINGERPRINT_KEY] = fingerprints(prompt_lists, list(vision_rows), self.image_token_id)
            response_lists, log_prob_lists = self._generate_token_ids_with_images(prompt_lists, list(vision_rows),
                                                                                  params)
        else:
            _refuse_images_without_inputs(prompts.non_tensor_batch)
            response_lists, log_prob_lists = self._generate_token_ids(prompt_lists, params)
        responses = pad_responses(response_lists, params.max_new_tokens, params.pad_token_id)
        log_probs = pad_log_probs(log_prob_lists, params.max_new_tokens) if log_prob_lists is not None else None
        tensors = build_rollout_tensors(
            input_ids, attention_mask, prompts.batch["position_ids"], responses, params.eos_token_ids, log_probs
        )
        meta_info = dict(prompts.meta_info)
        meta_info["timing"] = {**meta_info.get("timing", {}), "generate_sequences": time.perf_counter() - start}
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info)


def _refuse_images_without_inputs(non_tensor_batch: Mapping[str, Any]) -> None:
    """Prompts with images but no processed vision inputs would be generated blind: refuse them."""
    data = non_tensor_batch.get("multi_modal_data")
    if data is not None and any(row and row.get("image") for row in data):
        raise ValueError(
            "the prompts carry images (multi_modal_data) but no multi_modal_inputs, so the rollout cannot show them "
            "to the model: set data.return_multi_modal_inputs=True"
        )
