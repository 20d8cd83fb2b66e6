"""``FSDPCheckpointManager``: save / load a worker's model, optimizer, LR scheduler and RNG in verl 0.5's layout.

    {local_path}/                                   e.g. checkpoints/p/e/global_step_N/actor
      model_world_size_{W}_rank_{r}.pt              this rank's shard (DTensor values under FSDP2)
      optim_world_size_{W}_rank_{r}.pt              this rank's optimizer state, keyed by parameter name
      extra_state_world_size_{W}_rank_{r}.pt        {"lr_scheduler": state, "rng": {...}, "num_skipped_steps": n}
      fsdp_config.json                              {"FSDP_version": 1|2, "world_size": W}
      huggingface/                                  config, generation config, tokenizer (+ safetensors
                                                    weights when "hf_model" is in checkpoint.save_contents)
      checkpoint_complete.json                      hybridrl: written last by rank 0 after a barrier

Loading uses ``torch.load(weights_only=True)``: DTensors load once ``torch.distributed.tensor`` is
imported, and RNG states are stored as tensors/plain values (no allow-list needed). Shards are per
rank, so resuming needs the same world size (merge with ``python -m hybridrl.model_merger`` to change it).
A shared file system is assumed across nodes (the marker is written by rank 0 only).
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.tensor  # noqa: F401  (registers DTensor for weights_only loading)
from torch import nn

from hybridrl.utils.checkpoint import (
    clear_complete,
    get_rng_state,
    is_checkpoint_complete,
    mark_complete,
    resume_elsewhere_hint,
    rotate_component_checkpoints,
    save_failure_message,
    set_rng_state,
)
from hybridrl.utils.fs import local_mkdir_safe, replacing_file
from hybridrl.workers.engine import lora
from hybridrl.workers.engine.fsdp import fsdp_version
from hybridrl.workers.engine.hf_export import save_hf_config, save_hf_model
from hybridrl.workers.engine.state_dict import (
    get_full_state_dict,
    get_sharded_model_state_dict,
    get_sharded_optimizer_state_dict,
    set_sharded_model_state_dict,
    set_sharded_optimizer_state_dict,
)

CONTENTS = ("model", "optimizer", "extra", "hf_model")
_DEFAULT_CONTENTS = ["model", "optimizer", "extra"]  # verl 0.5's checkpoint.save_contents default
HF_SUBDIR = "huggingface"
FSDP_CONFIG_FILE = "fsdp_config.json"


def _rank_and_world() -> tuple[int, int]:
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _save_file(obj: Any, path: str) -> None:
    """``torch.save`` to a temp file, fsync, rename: a reader never sees half a file, a failure leaves no temp file.

    Raises:
        CheckpointSaveError: the disk refused the write (full, quota); torch reports that as a RuntimeError
            ("unexpected pos") whose context is the OSError.
    """
    try:
        with replacing_file(path) as tmp, open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as error:
        cause = error if isinstance(error, OSError) else error.__context__
        if not isinstance(cause, OSError):
            raise
        raise CheckpointSaveError(save_failure_message(os.path.dirname(path), cause)) from error


def checkpoint_contents(config: Any, key: str) -> list[str]:
    values = list(config.get(key, None) or _DEFAULT_CONTENTS) if config is not None else list(_DEFAULT_CONTENTS)
    unknown = sorted(set(values) - set(CONTENTS))
    if unknown:
        raise ValueError(f"checkpoint.{key} has unknown entries {unknown}; allowed: {list(CONTENTS)}.")
    return values


class FSDPCheckpointManager:
    """Save and restore one FSDP (or plain) module with its optimizer and LR scheduler.

    Args:
        model: the wrapped training module (FSDP2, FSDP1 or plain).
        optimizer, lr_scheduler: None for frozen models (ref) — then only ``model`` is saved.
        processing_class: tokenizer / processor saved into ``huggingface/``.
        checkpoint_config: ``*.checkpoint`` with ``save_contents`` / ``load_contents`` ⊆
            {model, optimizer, extra, hf_model}.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        checkpoint_config: Any = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        self.save_contents = checkpoint_contents(checkpoint_config, "save_contents")
        self.load_contents = checkpoint_contents(checkpoint_config, "load_contents")
        self.rank, self.world_size = _rank_and_world()
        self._is_lora = lora.unwrap_peft(model) is not None

    def _file(self, local_path: str, kind: str) -> str:
        return os.path.join(local_path, f"{kind}_world_size_{self.world_size}_rank_{self.rank}.pt")

    # ------------------------------------------------------------------------- save

    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        """Collective: every rank writes its shard; rank 0 writes the shared files and, last, the marker."""
        if hdfs_path is not None:
            raise NotImplementedError("hdfs_path is not supported; checkpoints are written to local_path only.")
        local_path = os.path.abspath(local_path)
        if self.rank == 0:
            local_mkdir_safe(local_path)
            clear_complete(local_path)  # from here until the marker, this folder is "partial"
        _barrier()
        try:
            self._save_rank_files(local_path)
            self._save_shared_files(local_path)
        except OSError as error:  # a full disk, a quota: name the folder and the way out, not torch's writer
            raise CheckpointSaveError(save_failure_message(local_path, error)) from error
        _barrier()
        if self.rank == 0:
            mark_complete(local_path, global_step=global_step, world_size=self.world_size)
            rotate_component_checkpoints(local_path, max_ckpt_to_keep)
        _barrier()

    def _save_rank_files(self, local_path: str) -> None:
        if "model" in self.save_contents:
            _save_file(get_sharded_model_state_dict(self.model), self._file(local_path, "model"))
        if "optimizer" in self.save_contents and self.optimizer is not None:
            _save_file(get_sharded_optimizer_state_dict(self.model, self.optimizer), self._file(local_path, "optim"))
        if "extra" in self.save_contents:
            _save_file(self._extra_state(), self._file(local_path, "extra_state"))

    def _extra_state(self) -> dict[str, Any]:
        return {
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
            "rng": get_rng_state(),
            "num_skipped_steps": int(getattr(self.optimizer, "num_skipped_steps", 0)),
        }

    def _save_shared_files(self, local_path: str) -> None:
        """``fsdp_config.json`` and ``huggingface/`` (rank 0); the full-weight gather is collective."""
        hf_dir = os.path.join(local_path, HF_SUBDIR)
        full_state = get_full_state_dict(self.model) if "hf_model" in self.save_contents else None
        adapter = lora.gather_lora_adapter(self.model) if self._is_lora else None
        if full_state is not None and self._is_lora:
            full_state = lora.merged_state_dict(full_state, lora.lora_scalings(self.model))
        if self.rank != 0:
            return
        if adapter is not None:  # verl: <step>/actor/lora_adapter/ (PeftModel.from_pretrained reads it)
            lora.save_lora_adapter(self.model, adapter, os.path.join(local_path, lora.ADAPTER_SUBDIR))
        version = fsdp_version(self.model)
        with open(os.path.join(local_path, FSDP_CONFIG_FILE), "w") as f:
            json.dump({"FSDP_version": version, "world_size": self.world_size}, f, indent=2)
        save_hf_config(self.model, hf_dir, self.processing_class)
        if full_state is not None:
            config = _read_hf_config(hf_dir)
            save_hf_model(config, full_state, hf_dir, self.processing_class)

    # ------------------------------------------------------------------------- load

    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Collective: restore what ``checkpoint.load_contents`` names from ``local_path``. None is a no-op."""
        if local_path is None:
            return
        if hdfs_path is not None:
            raise NotImplementedError("hdfs_path is not supported; pass a local checkpoint folder.")
        self._check_loadable(local_path)
        if "model" in self.load_contents:
            set_sharded_model_state_dict(self.model, _load(self._file(local_path, "model")))
        if "optimizer" in self.load_contents and self.optimizer is not None:
            optim_state = _load(self._file(local_path, "optim"))
            set_sharded_optimizer_state_dict(self.model, self.optimizer, optim_state)
        if "extra" in self.load_contents:
            self._restore_extra_state(_load(self._file(local_path, "extra_state")))
        _barrier()
        if del_local_after_load:
            self._delete_rank_files(local_path)

    def _check_loadable(self, local_path: str) -> None:
        if not is_checkpoint_complete(local_path):
            raise FileNotFoundError(
                f"{local_path} is not a complete checkpoint (no checkpoint_complete.json): a save was interrupted. "
                "Resume from an earlier global_step_N folder."
            )
        with open(os.path.join(local_path, FSDP_CONFIG_FILE)) as f:
            saved_world = json.load(f)["world_size"]
        if saved_world != self.world_size:
            raise ValueError(
                f"{local_path} was saved with world size {saved_world} but this run has {self.world_size}; "
                "resume with the same trainer.nnodes × n_gpus_per_node, or merge it to HF with "
                "`python -m hybridrl.model_merger merge` and start from that model."
            )

    def _restore_extra_state(self, extra: dict[str, Any]) -> None:
        if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        if extra.get("rng") is not None:
            set_rng_state(extra["rng"])
        if self.optimizer is not None:
            self.optimizer.num_skipped_steps = int(extra.get("num_skipped_steps", 0))  # type: ignore[attr-defined]

    def _delete_rank_files(self, local_path: str) -> None:
        if self.rank == 0:
            clear_complete(local_path)
        for kind in ("model", "optim", "extra_state"):
            path = self._file(local_path, kind)
            if os.path.exists(path):
                os.remove(path)


def _load(path: str) -> Any:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; was it saved with this checkpoint.save_contents and world size?")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's own message (PytorchStreamReader ...) names neither the file nor a way out
        raise CheckpointShardError(unreadable_shard_message(path, error)) from error


class CheckpointShardError(RuntimeError):
    """A worker's checkpoint file exists but cannot be read (truncated or corrupt)."""


class CheckpointSaveError(RuntimeError):
    """Writing a checkpoint failed (a full disk, a quota); its temporary files are removed."""


def unreadable_shard_message(path: str, error: Exception) -> str:
    """Name the file, why it cannot be read, and the newest complete ``global_step_M`` before its step.

    A file torch's weights-only loader refuses holds Python objects besides tensors and plain values: a crafted or
    foreign file. Torch's own message for it advises loading with pickle, which would run the payload; that advice
    is never repeated, only the object torch refused.
    """
    component = os.path.dirname(os.path.abspath(path))
    hint = resume_elsewhere_hint(os.path.dirname(component))
    if isinstance(error, pickle.UnpicklingError):
        refused = [line.strip() for line in str(error).splitlines() if "GLOBAL" in line]
        detail = f" ({refused[0]})" if refused else ""
        return (
            f"refused to load checkpoint file {path}: it holds Python objects that are not tensors or plain values"
            f"{detail}, which hybridrl never unpickles (a checkpoint hybridrl wrote holds none: the file was "
            f"replaced or crafted); {hint}."
        )
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"cannot read checkpoint file {path} ({type(error).__name__}: {first_line}): it is truncated or corrupt; {hint}."


def _read_hf_config(hf_dir: str) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(hf_dir)
