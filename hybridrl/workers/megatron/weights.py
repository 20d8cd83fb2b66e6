"""Built-in HF ↔ megatron-core weight converter for Llama/Qwen2-family models (``megatron.use_mbridge=False``).

Layout (HF name → megatron-core name, per layer ``i``; local spec / TransformerEngine spec names)::

    model.embed_tokens.weight [V, H]          embedding.word_embeddings.weight [V_pad/tp, H]   (rows split)
    q/k/v_proj.weight (+ .bias)               self_attention.linear_qkv.weight               (query groups split)
        [G, (N/G)·d | d | d, H]: per query group g, its N/G query heads then its key head then its value head
    o_proj.weight                             self_attention.linear_proj.weight               (columns split)
    input_layernorm.weight                    input_layernorm.weight | linear_qkv.layer_norm_weight
    post_attention_layernorm.weight           pre_mlp_layernorm.weight | linear_fc1.layer_norm_weight
    gate_proj, up_proj .weight                mlp.linear_fc1.weight = [gate_r; up_r] per rank r (rows split)
    down_proj.weight                          mlp.linear_fc2.weight                           (columns split)
    model.norm.weight                         decoder.final_layernorm.weight
    lm_head.weight (untied only)              output_layer.weight                              (rows split)

Notation: V vocab, H hidden, N query heads, G key/value heads (query groups), d head dim, tp the TP size.

Pipeline stages (PP > 1): a stage's ``decoder.layers.{j}`` is global layer ``j + offset`` (megatron-core's
``layer_number - 1``); the embedding lives on the first stage, the final norm and the output layer on the last.
With tied embeddings the last stage holds its own ``output_layer.weight`` (megatron-core keeps it equal to the
first stage's embedding by all-reducing their gradients): it is loaded from ``model.embed_tokens.weight`` and left
out of the export. Export gathers the stages over the PP group tensor by tensor (:func:`iter_hf_weights`).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["global_name", "hf_to_mcore_tensor", "is_tied_output", "iter_hf_weights", "layer_offset", "load_hf_weights",
           "mcore_to_hf_tensors", "merge_tp_shards", "read_hf_state_dict"]

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_DIRECT = {
    "embedding.word_embeddings.weight": "model.embed_tokens.weight",
    "decoder.final_layernorm.weight": "model.norm.weight",
    "output_layer.weight": "lm_head.weight",
}
_LAYER_SINGLE = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
}


def hf_names_of(mcore_name: str) -> list[str]:
    """The HF tensor names one megatron-core parameter is made of (3 for QKV, 2 for ``linear_fc1``)."""
    if mcore_name in _DIRECT:
        return [_DIRECT[mcore_name]]
    match = _LAYER.match(mcore_name)
    if match is None:
        raise KeyError(f"no HF name for megatron-core parameter {mcore_name!r}")
    layer, rest = match.groups()
    prefix = f"model.layers.{layer}."
    if rest in _LAYER_SINGLE:
        return [prefix + _LAYER_SINGLE[rest]]
    if rest.startswith("self_attention.linear_qkv."):
        kind = rest.rsplit(".", 1)[1]  # weight | bias
        return [f"{prefix}self_attn.{p}_proj.{kind}" for p in "qkv"]
    if rest == "mlp.linear_fc1.weight":
        return [prefix + "mlp.gate_proj.weight", prefix + "mlp.up_proj.weight"]
    raise KeyError(f"no HF name for megatron-core parameter {mcore_name!r}")


def _head_dims(hf_config: Any) -> tuple[int, int, int]:
    """``(query heads N, key/value heads G, head dim d)``."""
    heads, groups = hf_config.num_attention_heads, hf_config.num_key_value_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return heads, groups, head_dim


def hf_to_mcore_tensor(mcore_name: str, hf_tensors: list[torch.Tensor], hf_config: Any) -> torch.Tensor:
    """The full (TP=1) megatron-core tensor of ``mcore_name`` from its HF tensors (order of :func:`hf_names_of`)."""
    if "linear_qkv." in mcore_name and "layer_norm" not in mcore_name:
        heads, groups, head_dim = _head_dims(hf_config)
        q, k, v = hf_tensors  # [N·d, H], [G·d, H], [G·d, H] (or 1-D biases)
        tail = q.shape[1:]
        per_group = [q.reshape(groups, heads // groups * head_dim, *tail), k.reshape(groups, head_dim, *tail),
                     v.reshape(groups, head_dim, *tail)]
        return torch.cat(per_group, dim=1).reshape(-1, *tail)  # [G·(N/G + 2)·d, H]
    if mcore_name.endswith("mlp.linear_fc1.weight"):
        return torch.cat(hf_tensors, dim=0)  # [gate; up]  [2F, H]
    (tensor,) = hf_tensors
    return tensor


def mcore_to_hf_tensors(mcore_name: str, tensor: torch.Tensor, hf_config: Any) -> list[tuple[str, torch.Tensor]]:
    """Inverse of :func:`hf_to_mcore_tensor` on a full (TP-merged, vocab-unpadded) tensor."""
    names = hf_names_of(mcore_name)
    if len(names) == 3:
        heads, groups, head_dim = _head_dims(hf_config)
        per_group = tensor.reshape(groups, (heads // groups + 2) * head_dim, *tensor.shape[1:])
        q_len = heads // groups * head_dim
        parts = per_group.split([q_len, head_dim, head_dim], dim=1)
        return [(n, p.reshape(-1, *tensor.shape[1:]).contiguous()) for n, p in zip(names, parts)]
    if len(names) == 2:
        return list(zip(names, tensor.chunk(2, dim=0)))
    return [(names[0], tensor)]


def read_hf_state_dict(model_path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files of an HF folder (CPU)."""
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(os.path.expanduser(model_path), "*.safetensors")))
    if not files:
        raise FileNotFoundError(
            "strategy=megatron (use_mbridge=False) reads *.safetensors from "
            f"actor_rollout_ref.model.path={model_path!r}; "
            "none found (save the model with safe_serialization=True)."
        )
    state: dict[str, torch.Tensor] = {}
    for path in files:
        state.update(load_file(path))
    return state


def _tp_shard(name: str, full: torch.Tensor, param: nn.Parameter, tp_rank: int, tp_size: int) -> torch.Tensor:
    """This TP rank's slice of a full tensor (``linear_fc1``: the rank's gate rows then its up rows)."""
    if not getattr(param, "tensor_model_parallel", False) or tp_size == 1:
        return full
    if name.endswith("mlp.linear_fc1.weight"):
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(tp_size, 0)[tp_rank], up.chunk(tp_size, 0)[tp_rank]], dim=0)
    return full.chunk(tp_size, dim=param.partition_dim)[tp_rank]


def _pad_vocab(name: str, tensor: torch.Tensor, rows: int) -> torch.Tensor:
    if name in ("embedding.word_embeddings.weight", "output_layer.weight") and tensor.shape[0] < rows:
        return torch.cat([tensor, tensor.new_zeros(rows - tensor.shape[0], *tensor.shape[1:])])
    return tensor


def layer_offset(model: nn.Module) -> int:
    """Global index of this stage's first decoder layer (0 at PP=1): megatron-core's ``layer_number - 1``."""
    decoder = getattr(model, "decoder", None)
    layers = getattr(decoder, "layers", None)
    return int(layers[0].layer_number) - 1 if layers else 0


def global_name(name: str, offset: int) -> str:
    """``decoder.layers.{j}.…`` of a stage → ``decoder.layers.{j + offset}.…`` (other names unchanged)."""
    match = _LAYER.match(name)
    return name if match is None or offset == 0 else f"decoder.layers.{int(match.group(1)) + offset}.{match.group(2)}"


def is_tied_output(name: str, hf_config: Any) -> bool:
    """The last stage's copy of tied embeddings (PP > 1): HF has no ``lm_head.weight`` for it."""
    return name == "output_layer.weight" and bool(getattr(hf_config, "tie_word_embeddings", False))


def _hf_tensors_of(name: str, hf_state: dict[str, torch.Tensor], hf_config: Any) -> list[torch.Tensor]:
    if is_tied_output(name, hf_config) and "lm_head.weight" not in hf_state:
        return [hf_state["model.embed_tokens.weight"]]
    return [hf_state[n] for n in hf_names_of(name)]


@torch.no_grad()
def load_hf_weights(model: nn.Module, hf_state: dict[str, torch.Tensor], hf_config: Any) -> int:
    """Copy HF tensors into this rank's ``GPTModel`` (this PP stage's layers) parameters; returns how many
    parameters were set."""
    from megatron.core import parallel_state

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    offset = layer_offset(model)
    for local_name, param in model.named_parameters():
        name = global_name(local_name, offset)
        full = hf_to_mcore_tensor(name, _hf_tensors_of(name, hf_state, hf_config), hf_config)
        full = _pad_vocab(name, full, param.shape[0] * tp_size)
        shard = _tp_shard(name, full, param, tp_rank, tp_size)
        if shard.shape != param.shape:
            raise ValueError(
                f"HF weights of {name!r} give shape {tuple(shard.shape)}, the model has {tuple(param.shape)}"
            )
        param.copy_(shard.to(param.dtype))
    return sum(1 for _ in model.parameters())


def _merge_tp(name: str, param: torch.Tensor, tp_group: Any, tp_size: int) -> torch.Tensor:
    """The full tensor of a TP-sharded parameter (collective over the TP group)."""
    shards = [torch.empty_like(param) for _ in range(tp_size)]
    dist.all_gather(shards, param.detach().contiguous(), group=tp_group)
    return merge_tp_shards(name, shards, param.partition_dim)


def merge_tp_shards(name: str, shards: list[torch.Tensor], partition_dim: int) -> torch.Tensor:
    """The full tensor from its TP shards in rank order (``linear_fc1``: every rank's gate rows, then the up rows)."""
    if name.endswith("mlp.linear_fc1.weight"):
        gates, ups = zip(*(shard.chunk(2, dim=0) for shard in shards))
        return torch.cat([*gates, *ups], dim=0)
    return torch.cat(shards, dim=partition_dim)


@torch.no_grad()
def iter_hf_weights(model: nn.Module, hf_config: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(HF name, full tensor)`` of the whole model on every rank: TP shards gathered parameter by parameter,
    then (PP > 1) every stage's tensors broadcast to the other stages, stage after stage."""
    from megatron.core import parallel_state

    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        yield from _iter_stage_hf_weights(model, hf_config)
        return
    group = parallel_state.get_pipeline_model_parallel_group()
    ranks = dist.get_process_group_ranks(group)
    my_stage = parallel_state.get_pipeline_model_parallel_rank()
    device = next(model.parameters()).device  # NCCL receives into GPU buffers
    for stage, src in enumerate(ranks):
        local = _iter_stage_hf_weights(model, hf_config) if stage == my_stage else None
        yield from _broadcast_stage(local, src, group, device)


def _broadcast_stage(local: Iterator[tuple[str, torch.Tensor]] | None, src: int, group: Any,
                     device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
    """One stage's ``(name, tensor)`` stream from global rank ``src`` to its PP group (``local`` None on receivers):
    per tensor its name, shape and dtype as an object, then the tensor; a None header ends the stream."""
    while True:
        item = next(local, None) if local is not None else None
        header = [None if item is None else (item[0], tuple(item[1].shape), item[1].dtype)]
        dist.broadcast_object_list(header, src=src, group=group)
        if header[0] is None:
            return
        name, shape, dtype = header[0]
        tensor = item[1].contiguous() if item is not None else torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(tensor, src=src, group=group)
        yield name, tensor


def _iter_stage_hf_weights(model: nn.Module, hf_config: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(HF name, full tensor)`` of this PP stage (TP shards gathered; collective over TP)."""
    from megatron.core import parallel_state

    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    tp_group = parallel_state.get_tensor_model_parallel_group()
    offset = layer_offset(model)
    for local_name, param in model.named_parameters():
        name = global_name(local_name, offset)
        if is_tied_output(name, hf_config):
            continue  # the first stage exports the shared embedding
        full = param.detach()
        if getattr(param, "tensor_model_parallel", False) and tp_size > 1:
            full = _merge_tp(name, param, tp_group, tp_size)
        if name in ("embedding.word_embeddings.weight", "output_layer.weight"):
            full = full[: hf_config.vocab_size]
        yield from mcore_to_hf_tensors(name, full, hf_config)
