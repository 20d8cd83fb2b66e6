"""Merge an FSDP or Megatron checkpoint's per-rank shards into a standard Hugging Face folder.

    python -m hybridrl.model_merger merge --backend fsdp --local_dir ckpt/global_step_N/actor --target_dir out/
    python -m hybridrl.model_merger merge --backend megatron --local_dir ckpt/global_step_N/actor --target_dir out/
    python -m hybridrl.model_merger test  --backend fsdp --local_dir ckpt/global_step_N/actor --test_hf_dir ref/

``--backend megatron``: :mod:`hybridrl.workers.megatron.merger` (TP shards gathered on one CPU process).

``merge`` reads ``fsdp_config.json`` (world size W), loads ``model_world_size_W_rank_{0..W-1}.pt``,
concatenates every DTensor's local shards along its ``Shard`` placement (taking replica 0 of a
``Replicate`` mesh dimension, as in HSDP), builds the model class named by ``huggingface/config.json``
and writes safetensors + config + tokenizer. Tied embeddings are written once (HF drops
``lm_head.weight``). A LoRA checkpoint (peft names + ``lora_adapter/``) is written with its adapters
merged into the base weights, and ``lora_adapter/`` is copied beside them; a LoRA critic's value head is
written from its trained ``modules_to_save`` copy (a plain ``*ForTokenClassification`` folder).
``test`` compares the merged state dict with a reference HF folder.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import torch.distributed.tensor  # noqa: F401  (registers DTensor for weights_only loading)

from hybridrl.workers.engine.hf_export import save_hf_model

FSDP_CONFIG_FILE = "fsdp_config.json"
HF_SUBDIR = "huggingface"


def _shard_order(value: Any) -> tuple[list[int], int | None]:
    """Ranks whose local shards tile ``value`` (in order) and the tensor dim they are split on."""
    from torch.distributed.tensor import Shard

    mesh = value.device_mesh.mesh  # [mesh dims] → global rank
    shard_dims = [(i, p.dim) for i, p in enumerate(value.placements) if isinstance(p, Shard)]
    if len(shard_dims) > 1:
        raise NotImplementedError(
            f"placements {value.placements} shard on several mesh dims; only FSDP/HSDP layouts are supported."
        )
    index = [0] * mesh.ndim
    if not shard_dims:
        return [int(mesh[tuple(index)])], None
    mesh_dim, tensor_dim = shard_dims[0]
    ranks = []
    for i in range(mesh.shape[mesh_dim]):
        index[mesh_dim] = i
        ranks.append(int(mesh[tuple(index)]))
    return ranks, tensor_dim


def merge_shards(shards: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Full state dict from the per-rank sharded state dicts (index = global rank)."""
    from torch.distributed.tensor import DTensor

    merged = {}
    for name, value in shards[0].items():
        if not isinstance(value, DTensor):
            merged[name] = value.detach().clone()
            continue
        ranks, dim = _shard_order(value)
        pieces = [shards[r][name].to_local() for r in ranks]
        full = pieces[0] if dim is None else torch.cat(pieces, dim=dim)
        if tuple(full.shape) != tuple(value.shape):
            raise ValueError(f"{name}: merged shape {tuple(full.shape)} != global shape {tuple(value.shape)}")
        merged[name] = full.contiguous()
    return merged


def _is_megatron_folder(local_dir: str) -> bool:
    from hybridrl.workers.megatron.checkpoint_layout import LAYOUT_FILE

    return os.path.isfile(os.path.join(local_dir, LAYOUT_FILE))


def load_fsdp_state_dict(local_dir: str) -> dict[str, torch.Tensor]:
    """Read every rank's ``model_world_size_W_rank_r.pt`` in ``local_dir`` and merge them."""
    config_path = os.path.join(local_dir, FSDP_CONFIG_FILE)
    if not os.path.exists(config_path):
        hint = " (it is a Megatron checkpoint: use --backend megatron)" if _is_megatron_folder(local_dir) else ""
        raise FileNotFoundError(
            f"{config_path} not found; --local_dir must be a global_step_N/<actor|critic> folder{hint}."
        )
    with open(config_path) as f:
        world_size = int(json.load(f)["world_size"])
    shards = []
    for rank in range(world_size):
        path = os.path.join(local_dir, f"model_world_size_{world_size}_rank_{rank}.pt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing (fsdp_config.json says world_size={world_size}).")
        shards.append(torch.load(path, map_location="cpu", weights_only=True))
    return merge_shards(shards)


def load_merged_state_dict(local_dir: str, backend: str = "fsdp") -> dict[str, torch.Tensor]:
    """:func:`load_fsdp_state_dict`; a LoRA checkpoint's adapters are merged into the base weights
    (``W + lora_alpha/r · B @ A``, scaling read from ``lora_adapter/adapter_config.json``). ``backend="megatron"``:
    the TP shards of a Megatron checkpoint, converted to HF names."""
    from hybridrl.workers.engine.lora import ADAPTER_SUBDIR, is_lora_key, merged_state_dict, read_adapter_scaling

    if backend == "megatron":
        from hybridrl.workers.megatron.merger import load_megatron_hf_state_dict

        return load_megatron_hf_state_dict(local_dir)
    state_dict = load_fsdp_state_dict(local_dir)
    if not any(is_lora_key(name) for name in state_dict):
        return state_dict
    return merged_state_dict(state_dict, read_adapter_scaling(os.path.join(local_dir, ADAPTER_SUBDIR)))


def _load_hf_meta(local_dir: str, trust_remote_code: bool) -> tuple[Any, Any]:
    from transformers import AutoConfig, AutoTokenizer

    hf_dir = os.path.join(local_dir, HF_SUBDIR)
    config = AutoConfig.from_pretrained(hf_dir, trust_remote_code=trust_remote_code)
    try:
        tokenizer = AutoTokenizer.from_pretrained(hf_dir, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):  # the critic/RM folder may hold no tokenizer
        tokenizer = None
    return config, tokenizer


def merge(local_dir: str, target_dir: str, trust_remote_code: bool = False, backend: str = "fsdp") -> str:
    """Write ``target_dir`` as a HF folder from the checkpoint in ``local_dir``. Returns ``target_dir``."""
    import shutil

    from hybridrl.workers.engine.lora import ADAPTER_SUBDIR

    state_dict = load_merged_state_dict(local_dir, backend)
    config, tokenizer = _load_hf_meta(local_dir, trust_remote_code)
    save_hf_model(config, state_dict, target_dir, tokenizer)
    adapter_dir = os.path.join(local_dir, ADAPTER_SUBDIR)
    if os.path.isdir(adapter_dir):  # LoRA: keep the adapter beside the merged weights (as verl's merger)
        shutil.copytree(adapter_dir, os.path.join(target_dir, ADAPTER_SUBDIR), dirs_exist_ok=True)
    return target_dir


def check_against(local_dir: str, test_hf_dir: str, backend: str = "fsdp") -> None:
    """Raise if the merged weights differ from ``test_hf_dir``'s (names, shapes, values)."""
    from safetensors.torch import load_file

    merged = load_merged_state_dict(local_dir, backend)
    reference: dict[str, torch.Tensor] = {}
    for name in sorted(os.listdir(test_hf_dir)):
        if name.endswith(".safetensors"):
            reference.update(load_file(os.path.join(test_hf_dir, name)))
    extra = sorted(set(merged) - set(reference) - {"lm_head.weight"})
    missing = sorted(set(reference) - set(merged))
    if extra or missing:
        raise AssertionError(f"key mismatch: only in checkpoint {extra}, only in reference {missing}")
    for name, ref in reference.items():
        try:
            torch.testing.assert_close(merged[name].to(ref.dtype), ref)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hybridrl.model_merger", description=__doc__.splitlines()[0])
    parser.add_argument("operation", choices=["merge", "test"])
    parser.add_argument("--backend", choices=["fsdp", "megatron"], required=True,
                        help="fsdp, or megatron (TP shards; PP > 1 not yet)")
    parser.add_argument("--local_dir", required=True, help="…/global_step_N/actor (or critic)")
    parser.add_argument("--target_dir", default=None, help="output HF folder (merge)")
    parser.add_argument("--test_hf_dir", default=None, help="reference HF folder (test)")
    parser.add_argument("--trust-remote-code", action="store_true")
    # Accepted for verl CLI compatibility; the config and state dict already say both.
    parser.add_argument("--tie-word-embedding", action="store_true", help="ignored: read from config.json")
    parser.add_argument("--is-value-model", action="store_true", help="ignored: read from config.json")
    args = parser.parse_args(argv)
    if args.operation == "merge":
        if not args.target_dir:
            parser.error("merge needs --target_dir")
        target = merge(args.local_dir, args.target_dir, args.trust_remote_code, args.backend)
        print(f"[model_merger] wrote {target}")
    else:
        if not args.test_hf_dir:
            parser.error("test needs --test_hf_dir")
        check_against(args.local_dir, args.test_hf_dir, args.backend)
        print(f"[model_merger] {args.local_dir} matches {args.test_hf_dir}")


if __name__ == "__main__":
    main()
