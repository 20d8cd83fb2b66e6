"""File layout of a Megatron checkpoint folder and its tensor files (no megatron-core import: the merger uses it).

verl's per-rank Megatron layout (``MegatronCheckpointManager.get_checkpoint_name`` and the ``model/``, ``optim/``,
``rng_states/``, ``huggingface/`` folders), with safetensors instead of ``torch.save`` pickles::

    {local_path}/                                         e.g. checkpoints/p/e/global_step_N/actor
      megatron_checkpoint.json                            hybridrl: parallel sizes and contents (written first)
      model/mp_rank_{tp:02d}[_{pp:03d}]/model.safetensors  the TP/PP shard (DP rank 0 writes it; _{pp} when PP > 1)
      optim/distrib_optim_pp{p}_tp{t}_cp{c}_dp{d}.safetensors   this rank's optimizer state, by parameter name
      rng_states/rng_states_pp{p}_tp{t}_cp{c}_dp{d}.safetensors this rank's RNG states
      extra_state.json                                    the LR scheduler state (+ the caller's extra state)
      transformer_config.json                             megatron-core's TransformerConfig (verl 0.5, informative)
      huggingface/                                        config + tokenizer (+ safetensors with "hf_model")
      checkpoint_complete.json                            written last by rank 0 after a barrier

Every ``.safetensors`` file carries its non-tensor data as JSON in the header metadata key ``"hybridrl"``.
Nothing here unpickles: tensors are read with safetensors, everything else with ``json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import torch

LAYOUT_FILE = "megatron_checkpoint.json"
EXTRA_STATE_FILE = "extra_state.json"
TRANSFORMER_CONFIG_FILE = "transformer_config.json"
HF_SUBDIR = "huggingface"
_META_KEY = "hybridrl"
FORMAT = "hybridrl-megatron-1"


@dataclass(frozen=True)
class ParallelSizes:
    """The model-parallel layout a checkpoint was written with (resuming needs the same)."""

    tp: int
    pp: int
    cp: int
    dp: int

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp


@dataclass(frozen=True)
class RankCoords:
    """One rank's position in the layout."""

    tp: int
    pp: int
    cp: int
    dp: int

    @property
    def suffix(self) -> str:
        return f"pp{self.pp}_tp{self.tp}_cp{self.cp}_dp{self.dp}"


def model_file(root: str, tp_rank: int, pp_rank: int, pp_size: int) -> str:
    """``model/mp_rank_{tp:02d}[_{pp:03d}]/model.safetensors`` (verl's folder names)."""
    folder = f"mp_rank_{tp_rank:02d}" if pp_size == 1 else f"mp_rank_{tp_rank:02d}_{pp_rank:03d}"
    return os.path.join(root, "model", folder, "model.safetensors")


def optim_file(root: str, coords: RankCoords) -> str:
    return os.path.join(root, "optim", f"distrib_optim_{coords.suffix}.safetensors")


def rng_file(root: str, coords: RankCoords) -> str:
    return os.path.join(root, "rng_states", f"rng_states_{coords.suffix}.safetensors")


def all_coords(sizes: ParallelSizes) -> list[RankCoords]:
    return [RankCoords(tp, pp, cp, dp) for pp in range(sizes.pp) for tp in range(sizes.tp)
            for cp in range(sizes.cp) for dp in range(sizes.dp)]


def expected_files(root: str, sizes: ParallelSizes, contents: list[str]) -> list[str]:
    """Every file of ``contents`` (model, optimizer, extra) that a complete checkpoint holds."""
    files = []
    if "model" in contents:
        files += [model_file(root, tp, pp, sizes.pp) for pp in range(sizes.pp) for tp in range(sizes.tp)]
    if "optimizer" in contents:
        files += [optim_file(root, coords) for coords in all_coords(sizes)]
    if "extra" in contents:
        files += [rng_file(root, coords) for coords in all_coords(sizes)] + [os.path.join(root, EXTRA_STATE_FILE)]
    return files


# ----------------------------------------------------------------------------- layout file


def write_layout(root: str, sizes: ParallelSizes, contents: list[str], **info: Any) -> None:
    """``megatron_checkpoint.json``: the format, the parallel sizes and the saved contents."""
    from hybridrl.utils.fs import atomic_write_text

    payload = {"format": FORMAT, "parallel_sizes": asdict(sizes), "contents": list(contents), **info}
    atomic_write_text(os.path.join(root, LAYOUT_FILE), json.dumps(payload, indent=2, sort_keys=True))


def read_layout(root: str) -> tuple[ParallelSizes, list[str], dict[str, Any]]:
    """``(sizes, saved contents, the whole JSON)`` of a checkpoint folder; a clear error when it is not one."""
    path = os.path.join(root, LAYOUT_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} not found: {root} is not a Megatron checkpoint folder (expected global_step_N/<actor|critic> "
            "written by a strategy=megatron worker)."
        )
    with open(path) as f:
        payload = json.load(f)
    if payload.get("format") != FORMAT:
        raise ValueError(f"{path}: format {payload.get('format')!r} is not {FORMAT!r}")
    return ParallelSizes(**payload["parallel_sizes"]), list(payload["contents"]), payload


def check_files_exist(root: str, sizes: ParallelSizes, contents: list[str]) -> None:
    """Raise FileNotFoundError naming the first missing file of ``contents``."""
    for path in expected_files(root, sizes, contents):
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} is missing from the Megatron checkpoint {root} (its layout: {asdict(sizes)}); the folder is "
                "incomplete: resume from another global_step_N folder."
            )


# ----------------------------------------------------------------------------- tensor files


def write_tensor_file(path: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any] | None = None) -> None:
    """safetensors (CPU copies of ``tensors``) + ``meta`` as JSON in the header; temp file then rename."""
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path), exist_ok=True)
    cpu = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in tensors.items()}
    tmp = f"{path}.tmp"
    save_file(cpu, tmp, metadata={_META_KEY: json.dumps(meta or {})})
    os.replace(tmp, path)


def read_tensor_file(path: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, meta)`` of :func:`write_tensor_file`; CheckpointShardError when the file is not one."""
    from safetensors import safe_open

    from hybridrl.workers.engine.checkpoint import CheckpointShardError, unreadable_shard_message

    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing; was it saved with this checkpoint.save_contents and layout?")
    try:
        with safe_open(path, framework="pt", device="cpu") as reader:
            meta = json.loads((reader.metadata() or {}).get(_META_KEY, "{}"))
            tensors = {name: reader.get_tensor(name) for name in reader.keys()}
    except Exception as error:  # safetensors' own message names neither the file nor a way out
        raise CheckpointShardError(unreadable_shard_message(path, error)) from error
    return tensors, meta


def read_json(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing; was it saved with this checkpoint.save_contents?")
    with open(path) as f:
        return json.load(f)
