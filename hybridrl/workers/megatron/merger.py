"""``model_merger --backend megatron``: a Megatron checkpoint's TP/PP shards → one HF state dict, on one CPU process.

Reads ``megatron_checkpoint.json`` (the TP and PP sizes), ``model/mp_rank_{tp:02d}[_{pp:03d}]/model.safetensors``
of every TP rank of every pipeline stage and ``huggingface/config.json``; concatenates each TP-sharded tensor along
the dim recorded at save time (``linear_fc1``: all gate rows, then all up rows), renames a stage's local
``decoder.layers.{j}`` to the global layer ``j + layer_offset`` (the offset saved with the stage's shard), drops
the vocab padding and converts megatron-core names to HF names with the built-in converter
(:mod:`hybridrl.workers.megatron.weights`, Llama/Qwen2 family). The embedding comes from the first stage, the final
norm and ``lm_head`` from the last; with tied embeddings the last stage's ``output_layer.weight`` (megatron-core's
copy of the embedding, kept equal through its gradients) is left out, as HF has no ``lm_head.weight`` then. No
megatron-core, no ``torch.distributed``, no pickle.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from hybridrl.utils.checkpoint import is_checkpoint_complete
from hybridrl.workers.megatron import checkpoint_layout as layout
from hybridrl.workers.megatron.weights import global_name, is_tied_output, mcore_to_hf_tensors, merge_tp_shards

__all__ = ["load_megatron_hf_state_dict"]

_VOCAB_ROWS = ("embedding.word_embeddings.weight", "output_layer.weight")


def _check_folder(local_dir: str) -> layout.ParallelSizes:
    """The parallel sizes of a complete Megatron checkpoint with model shards; a clear error otherwise."""
    if not os.path.isdir(local_dir):
        raise FileNotFoundError(f"--local_dir {local_dir} is not a folder; pass …/global_step_N/actor (or critic).")
    if os.path.isfile(os.path.join(local_dir, "fsdp_config.json")):
        raise FileNotFoundError(f"{local_dir} is an FSDP checkpoint (fsdp_config.json): use --backend fsdp.")
    sizes, contents, _ = layout.read_layout(local_dir)
    if not is_checkpoint_complete(local_dir):
        raise FileNotFoundError(f"{local_dir} has no checkpoint_complete.json: its save was interrupted; merge "
                                "another global_step_N folder.")
    if "model" not in contents:
        raise ValueError(f"{local_dir} was saved with save_contents={contents} (no model shards); nothing to merge.")
    layout.check_files_exist(local_dir, sizes, ["model"])
    return sizes


def load_megatron_hf_state_dict(local_dir: str, trust_remote_code: bool = False) -> dict[str, torch.Tensor]:
    """``{HF name: full tensor}`` of the model in a Megatron checkpoint folder (``global_step_N/<component>``)."""
    from transformers import AutoConfig

    sizes = _check_folder(local_dir)
    hf_config: Any = AutoConfig.from_pretrained(os.path.join(local_dir, layout.HF_SUBDIR),
                                                trust_remote_code=trust_remote_code)
    state: dict[str, torch.Tensor] = {}
    next_layer = 0
    for pp in range(sizes.pp):
        shards = [layout.read_tensor_file(layout.model_file(local_dir, tp, pp, sizes.pp)) for tp in range(sizes.tp)]
        offset = int(shards[0][1].get("layer_offset", next_layer))
        for name, full in _merged_stage(shards, offset):
            if is_tied_output(name, hf_config):
                continue  # the first stage's embedding is the HF tensor
            if name in _VOCAB_ROWS:
                full = full[: hf_config.vocab_size]
            state.update(_to_hf(name, full, hf_config, local_dir))
        next_layer = offset + _layer_count(shards[0][0])
    return state


def _merged_stage(shards: list[tuple[dict[str, torch.Tensor], dict[str, Any]]],
                  offset: int) -> list[tuple[str, torch.Tensor]]:
    """One stage's ``(global megatron-core name, full tensor)`` from its TP shards ``[(tensors, meta)]``."""
    partition_dims: dict[str, int] = shards[0][1]["tensor_parallel_partition_dim"]
    merged = []
    for name in shards[0][0]:
        pieces = [tensors[name] for tensors, _meta in shards]
        full = merge_tp_shards(name, pieces, partition_dims[name]) if name in partition_dims else pieces[0]
        merged.append((global_name(name, offset), full))
    return merged


def _layer_count(tensors: dict[str, torch.Tensor]) -> int:
    """How many decoder layers a stage's shard holds (``decoder.layers.{j}.…``, local indices)."""
    return len({name.split(".")[2] for name in tensors if name.startswith("decoder.layers.")})


def _to_hf(name: str, full: torch.Tensor, hf_config: Any, local_dir: str) -> list[tuple[str, torch.Tensor]]:
    try:
        return mcore_to_hf_tensors(name, full, hf_config)
    except KeyError as error:
        raise ValueError(f"{local_dir}: {error.args[0]}; the megatron merger converts Llama/Qwen2-family causal "
                         "LMs (hybridrl.workers.megatron.weights).") from None
