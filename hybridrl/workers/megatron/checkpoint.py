"""Save / load one Megatron model with its megatron-core optimizer, LR scheduler and RNG states (any role).

The layout (verl's per-rank Megatron folders, safetensors + JSON instead of pickles) is in
:mod:`hybridrl.workers.megatron.checkpoint_layout`. Both functions are collective over all ranks (call them on
every rank after :func:`init_megatron_parallel`). Completeness is the FSDP checkpoints' protocol
(:mod:`hybridrl.utils.checkpoint`): rank 0 removes ``checkpoint_complete.json`` first, writes
``megatron_checkpoint.json``, every rank writes its files (temp file + rename each), and after a barrier rank 0
writes the marker, so an interrupted save is never resumed from. Loading checks the marker, the parallel layout
and that every file of ``load_contents`` exists on disk (the error names the missing file) before it changes
any state, and reads tensors with safetensors only.

``save_contents`` / ``load_contents`` ⊆ {model, optimizer, extra, hf_model} (``checkpoint.*_contents``):
``model`` the TP/PP shards (each pipeline stage its own layers, local indices, + its ``layer_offset``) +
``huggingface/`` config and tokenizer; ``optimizer`` each rank's optimizer state;
``extra`` RNG states, the LR scheduler and the caller's JSON ``extra_state``; ``hf_model`` a full HF copy
(safetensors) in ``huggingface/`` written by rank 0 (merge-free export, as verl's).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.utils.checkpoint import (
    clear_complete,
    get_rng_state,
    is_checkpoint_complete,
    mark_complete,
    rotate_component_checkpoints,
    set_rng_state,
)
from hybridrl.utils.fs import atomic_write_text, local_mkdir_safe
from hybridrl.workers.engine.checkpoint import CheckpointShardError
from hybridrl.workers.megatron import checkpoint_layout as layout
from hybridrl.workers.megatron.engine import MegatronModel, export_hf_weights
from hybridrl.workers.megatron.optimizer_state import load_optimizer_state, optimizer_state

__all__ = ["load_megatron_checkpoint", "save_megatron_checkpoint"]

HfWeights = Callable[[MegatronModel], Iterable[tuple[str, torch.Tensor]]]


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _rank_layout() -> tuple[layout.RankCoords, layout.ParallelSizes]:
    """This rank's coordinates and the parallel sizes (megatron-core's parallel state)."""
    from megatron.core import parallel_state as ps

    coords = layout.RankCoords(ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank(),
                               ps.get_context_parallel_rank(), ps.get_data_parallel_rank())
    sizes = layout.ParallelSizes(ps.get_tensor_model_parallel_world_size(),
                                 ps.get_pipeline_model_parallel_world_size(),
                                 ps.get_context_parallel_world_size(), ps.get_data_parallel_world_size())
    return coords, sizes


# ----------------------------------------------------------------------------- save


def save_megatron_checkpoint(local_path: str, model: MegatronModel, optimizer: Any = None, lr_scheduler: Any = None,
                             *, save_contents: Sequence[str], tokenizer: Any = None, global_step: int = 0,
                             max_ckpt_to_keep: int | None = None, extra_state: dict[str, Any] | None = None,
                             hf_weights: HfWeights | None = None) -> None:
    """Write this rank's part of the checkpoint in ``local_path`` (collective; see the module docstring).

    Args:
        model: this rank's :class:`MegatronModel`; optimizer: its megatron-core optimizer (None: frozen model);
        lr_scheduler: a torch scheduler or a group with ``.schedulers`` (None: none).
        save_contents: ⊆ {model, optimizer, extra, hf_model}.
        tokenizer: saved into ``huggingface/`` by rank 0 (None: config only).
        max_ckpt_to_keep: keep the newest N complete ``global_step_*/<component>`` folders (None/≤0: all).
        extra_state: JSON-able values restored by :func:`load_megatron_checkpoint` (``extra``).
        hf_weights: ``(HF name, full tensor)`` pairs for ``hf_model`` (default :func:`export_hf_weights`).
    """
    local_path = os.path.abspath(local_path)
    contents = [c for c in save_contents if c != "optimizer" or optimizer is not None]
    coords, sizes = _rank_layout()
    if _rank() == 0:
        local_mkdir_safe(local_path)
        clear_complete(local_path)  # from here until the marker, this folder is "partial"
        layout.write_layout(local_path, sizes, contents, global_step=int(global_step))
    _barrier()
    if "model" in contents and coords.dp == 0 and coords.cp == 0:
        tensors, meta = _model_state(model)
        layout.write_tensor_file(layout.model_file(local_path, coords.tp, coords.pp, sizes.pp), tensors, meta)
    if "optimizer" in contents:
        tensors, meta = optimizer_state(optimizer, model.gpt)
        layout.write_tensor_file(layout.optim_file(local_path, coords), tensors, meta)
    if "extra" in contents:
        layout.write_tensor_file(layout.rng_file(local_path, coords), *_rng_state())
    _save_shared_files(local_path, model, contents, tokenizer, lr_scheduler, extra_state)
    if "hf_model" in contents:
        _save_hf_model(local_path, model, tokenizer, hf_weights or export_hf_weights)
    _barrier()
    if _rank() == 0:
        mark_complete(local_path, global_step=int(global_step), world_size=sizes.world_size)
        rotate_component_checkpoints(local_path, max_ckpt_to_keep)
    _barrier()


def _model_state(model: MegatronModel) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """This stage's GPTModel tensors (local layer indices) + which are TP-sharded and on which dim, and the global
    index of the stage's first decoder layer (``layer_offset``; the merger's input)."""
    from megatron.core import parallel_state as ps

    from hybridrl.workers.megatron.weights import layer_offset

    tensors = {name: value for name, value in model.gpt.state_dict().items() if isinstance(value, torch.Tensor)}
    sharded = {name: int(param.partition_dim)  # type: ignore[attr-defined]
               for name, param in model.gpt.named_parameters() if getattr(param, "tensor_model_parallel", False)}
    meta = {"tensor_parallel_partition_dim": sharded, "tp_size": ps.get_tensor_model_parallel_world_size(),
            "vocab_size": int(model.hf_config.vocab_size),
            "pp_rank": ps.get_pipeline_model_parallel_rank(), "layer_offset": layer_offset(model.gpt)}
    return tensors, meta


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """python / numpy / torch (+ CUDA) RNG and megatron-core's RNG tracker states as tensors + JSON."""
    from megatron.core import tensor_parallel

    state = get_rng_state()
    kind, numpy_keys, pos, has_gauss, cached_gaussian = state["numpy"]
    tensors = {"torch_cpu": state["cpu"], "numpy_keys": numpy_keys}
    if "cuda" in state:
        tensors["torch_cuda"] = state["cuda"]
    for name, tracker_state in tensor_parallel.get_cuda_rng_tracker().get_states().items():
        tensors[f"tracker::{name}"] = tracker_state
    version, internal, gauss = state["random"]
    meta = {"numpy": [kind, pos, has_gauss, cached_gaussian], "random": [version, list(internal), gauss]}
    return tensors, meta


def _schedulers(lr_scheduler: Any) -> list[Any]:
    """The torch schedulers of ``lr_scheduler`` (a group with ``.schedulers``, one scheduler, or None)."""
    return getattr(lr_scheduler, "schedulers", None) or ([lr_scheduler] if lr_scheduler is not None else [])


def _save_shared_files(local_path: str, model: MegatronModel, contents: list[str], tokenizer: Any,
                       lr_scheduler: Any, extra_state: dict[str, Any] | None) -> None:
    """Rank 0: ``extra_state.json`` + ``transformer_config.json`` (extra), ``huggingface/`` config + tokenizer."""
    if _rank() != 0:
        return
    if "extra" in contents:
        payload = {"lr_scheduler": [s.state_dict() for s in _schedulers(lr_scheduler)], "extra_state": extra_state or {}}
        atomic_write_text(os.path.join(local_path, layout.EXTRA_STATE_FILE), json.dumps(payload, indent=2))
        atomic_write_text(os.path.join(local_path, layout.TRANSFORMER_CONFIG_FILE),
                          json.dumps(_transformer_config_json(model.config), indent=2, sort_keys=True))
    if "model" in contents or "hf_model" in contents:
        _save_hf_config(os.path.join(local_path, layout.HF_SUBDIR), model.hf_config, tokenizer)


def _transformer_config_json(config: Any) -> dict[str, Any]:
    """megatron-core's TransformerConfig fields: plain values as they are, others as text, callables dropped."""
    plain = (bool, int, float, str, type(None))
    out: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, plain):
            out[field.name] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, plain) for v in value):
            out[field.name] = list(value)
        elif not callable(value):
            out[field.name] = str(value)
    return out


def _save_hf_config(hf_dir: str, hf_config: Any, tokenizer: Any) -> None:
    """``config.json``, ``generation_config.json`` when the source model has one, tokenizer files."""
    from transformers import GenerationConfig

    os.makedirs(hf_dir, exist_ok=True)
    hf_config.save_pretrained(hf_dir)
    source = getattr(hf_config, "name_or_path", None)
    if source and os.path.isfile(os.path.join(source, "generation_config.json")):
        GenerationConfig.from_pretrained(source).save_pretrained(hf_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(hf_dir)


def _save_hf_model(local_path: str, model: MegatronModel, tokenizer: Any, hf_weights: HfWeights) -> None:
    """Full HF weights gathered on every rank (collective over TP), written as safetensors by rank 0."""
    from hybridrl.workers.engine.hf_export import save_hf_model

    state = {name: tensor.detach().cpu() for name, tensor in hf_weights(model)} if _rank() == 0 else None
    if state is None:
        for _ in hf_weights(model):  # take part in the TP gathers
            pass
        return
    save_hf_model(model.hf_config, state, os.path.join(local_path, layout.HF_SUBDIR), tokenizer)


# ----------------------------------------------------------------------------- load


def load_megatron_checkpoint(local_path: str, model: MegatronModel, optimizer: Any = None, lr_scheduler: Any = None,
                             *, load_contents: Sequence[str]) -> dict[str, Any]:
    """Restore what ``load_contents`` names from ``local_path`` (collective); returns the saved ``extra_state``.

    Every rank reads all its files before any state changes, and the ranks agree: when one rank cannot, all raise
    (FileNotFoundError: no marker or a missing file, named; ValueError: another parallel layout or contents that
    were not saved; CheckpointShardError: a file that is not safetensors, named).
    """
    local_path = os.path.abspath(local_path)
    contents = [c for c in load_contents if c != "hf_model" and (c != "optimizer" or optimizer is not None)]
    files: dict[str, Any] = {}
    try:
        coords, sizes = _check_loadable(local_path, contents)
        files = _read_rank_files(local_path, coords, sizes, contents)
        error = None
    except (OSError, ValueError, RuntimeError) as caught:
        error = caught
    _raise_if_any_rank_failed(error)
    if "model" in files:
        _load_model_state(model, files["model"][0], files["model_path"])
        if optimizer is not None and "optimizer" not in files:
            optimizer.reload_model_params()  # the optimizer's fp32 main parameters follow the loaded weights
    if "optimizer" in files:
        tensors, meta = files["optimizer"]
        load_optimizer_state(optimizer, model.gpt, tensors, meta, source=files["optimizer_path"])
    extra_state: dict[str, Any] = {}
    if "extra" in files:
        _set_rng_state(*files["rng"])
        _load_scheduler_states(lr_scheduler, files["extra"]["lr_scheduler"], local_path)
        extra_state = files["extra"]["extra_state"]
    _barrier()
    return extra_state


def _read_rank_files(local_path: str, coords: layout.RankCoords, sizes: layout.ParallelSizes,
                     contents: list[str]) -> dict[str, Any]:
    """This rank's files of ``contents``, read (safetensors / JSON) into memory."""
    files: dict[str, Any] = {}
    if "model" in contents:
        files["model_path"] = layout.model_file(local_path, coords.tp, coords.pp, sizes.pp)
        files["model"] = layout.read_tensor_file(files["model_path"])
    if "optimizer" in contents:
        files["optimizer_path"] = layout.optim_file(local_path, coords)
        files["optimizer"] = layout.read_tensor_file(files["optimizer_path"])
    if "extra" in contents:
        files["rng"] = layout.read_tensor_file(layout.rng_file(local_path, coords))
        files["extra"] = layout.read_json(os.path.join(local_path, layout.EXTRA_STATE_FILE))
    return files


def _raise_if_any_rank_failed(error: BaseException | None) -> None:
    """Raise on every rank when one rank failed (its message; this rank's own error where it has one)."""
    messages: list[str | None] = [f"{type(error).__name__}: {error}" if error is not None else None]
    if dist.is_initialized() and dist.get_world_size() > 1:
        messages = [None] * dist.get_world_size()
        dist.all_gather_object(messages, f"{type(error).__name__}: {error}" if error is not None else None)
    if error is not None:
        raise error
    failed = [(rank, message) for rank, message in enumerate(messages) if message is not None]
    if failed:
        rank, message = failed[0]
        raise CheckpointShardError(f"rank {rank} could not load its part of the checkpoint: {message}")


def _check_loadable(local_path: str, contents: list[str]) -> tuple[layout.RankCoords, layout.ParallelSizes]:
    """Marker, layout and files, checked on every rank before any state changes."""
    if not is_checkpoint_complete(local_path):
        raise FileNotFoundError(
            f"{local_path} is not a complete checkpoint (no checkpoint_complete.json): a save was interrupted. "
            "Resume from an earlier global_step_N folder."
        )
    saved_sizes, saved_contents, _ = layout.read_layout(local_path)
    coords, sizes = _rank_layout()
    if saved_sizes != sizes:
        raise ValueError(
            f"{local_path} was saved with parallel sizes {dataclasses.asdict(saved_sizes)}, this run has "
            f"{dataclasses.asdict(sizes)}; resume with the same megatron.*_parallel_size and world size, or merge it "
            "to HF with `python -m hybridrl.model_merger merge --backend megatron` and start from that model."
        )
    unsaved = [c for c in contents if c not in saved_contents]
    if unsaved:
        raise ValueError(f"checkpoint.load_contents names {unsaved}, but {local_path} was saved with "
                         f"save_contents={saved_contents}; drop them from checkpoint.load_contents.")
    layout.check_files_exist(local_path, sizes, contents)
    return coords, sizes


@torch.no_grad()
def _load_model_state(model: MegatronModel, tensors: dict[str, torch.Tensor], path: str) -> None:
    missing, unexpected = model.gpt.load_state_dict(tensors, strict=False)
    missing = [name for name in missing if not name.endswith("_extra_state")]
    if missing or unexpected:
        raise ValueError(f"{path} does not match this model: missing {missing[:5]}, unexpected {unexpected[:5]}; "
                         "it was saved from another model or parallel layout.")


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    from megatron.core import tensor_parallel

    kind, pos, has_gauss, cached_gaussian = meta["numpy"]
    version, internal, gauss = meta["random"]
    state: dict[str, Any] = {"cpu": tensors["torch_cpu"], "random": (version, tuple(internal), gauss),
                             "numpy": (kind, tensors["numpy_keys"], pos, has_gauss, cached_gaussian)}
    if "torch_cuda" in tensors:
        state["cuda"] = tensors["torch_cuda"]
    set_rng_state(state)
    tracker = {name.split("::", 1)[1]: value for name, value in tensors.items() if name.startswith("tracker::")}
    if tracker:
        tensor_parallel.get_cuda_rng_tracker().set_states(tracker)


def _load_scheduler_states(lr_scheduler: Any, states: list[dict[str, Any]], local_path: str) -> None:
    schedulers = _schedulers(lr_scheduler)
    if len(states) != len(schedulers):
        raise ValueError(f"{local_path}: {len(states)} LR scheduler states saved, this run has {len(schedulers)}")
    for scheduler, state in zip(schedulers, states):
        scheduler.load_state_dict(state)
