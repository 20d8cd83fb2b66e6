"""SFT checkpoints: verl 0.5's layout, written by the engine's ``FSDPCheckpointManager``.

    {trainer.default_local_dir}/
      latest_checkpointed_iteration.txt        "N" of the newest complete save (the resume tracker)
      global_step_N/
        model_world_size_W_rank_r.pt, optim_…, extra_state_…, fsdp_config.json, checkpoint_complete.json
        huggingface/                           config + tokenizer; + model.safetensors in the final save

The final save always carries the full weights in ``global_step_N/huggingface`` (an ordinary HF folder
that ``AutoModelForCausalLM.from_pretrained`` and ``actor_rollout_ref.model.path`` accept); earlier
saves only when ``trainer.checkpoint.save_contents`` lists ``hf_model``.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import torch.distributed as dist

from hybridrl.utils.checkpoint import (
    find_latest_ckpt_path,
    is_checkpoint_complete,
    list_step_dirs,
    step_of,
    write_checkpoint_tracker,
)
from hybridrl.workers.engine import FSDPCheckpointManager

if TYPE_CHECKING:
    from omegaconf import DictConfig

HF_EXPORT_SUBDIR = "huggingface"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def step_dir(root: str, global_step: int) -> str:
    """``{root}/global_step_{global_step}``."""
    return os.path.join(root, f"global_step_{global_step}")


def hf_export_dir(root: str, global_step: int) -> str:
    """Where the HF weights of a save live: ``{root}/global_step_N/huggingface``."""
    return os.path.join(step_dir(root, global_step), HF_EXPORT_SUBDIR)


def save_step(
    manager: FSDPCheckpointManager, root: str, global_step: int, max_ckpt_to_keep: int | None, with_hf_weights: bool
) -> str:
    """Collective: save ``global_step_N``, update the tracker, drop old saves. Returns the step folder."""
    path = step_dir(root, global_step)
    contents = list(manager.save_contents)
    if with_hf_weights and "hf_model" not in contents:
        manager.save_contents = [*contents, "hf_model"]
    try:
        manager.save_checkpoint(path, global_step=global_step)
    finally:
        manager.save_contents = contents
    if _rank() == 0:
        write_checkpoint_tracker(root, global_step)
        rotate_step_dirs(root, max_ckpt_to_keep)
    _barrier()
    return path


def rotate_step_dirs(root: str, max_ckpt_to_keep: int | None) -> list[str]:
    """Keep the newest ``max_ckpt_to_keep`` complete ``global_step_N`` folders (None or <= 0: keep all)."""
    if not max_ckpt_to_keep or max_ckpt_to_keep <= 0:
        return []
    complete = [path for _, path in list_step_dirs(root) if is_checkpoint_complete(path)]
    removed = complete[: max(0, len(complete) - max_ckpt_to_keep)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def resume_folder(trainer_config: DictConfig) -> str | None:
    """The ``global_step_N`` folder to resume from per ``trainer.resume_mode`` (auto | disable | resume_path)."""
    mode = trainer_config.resume_mode
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = str(trainer_config.resume_from_path)
        if step_of(path) is None or not is_checkpoint_complete(path):
            raise FileNotFoundError(f"trainer.resume_from_path={path} is not a complete global_step_N checkpoint.")
        return path
    return find_latest_ckpt_path(str(trainer_config.default_local_dir))


def resumed_step(path: str | None) -> int:
    """The global step a resume folder holds (0 when starting fresh)."""
    if path is None:
        return 0
    step = step_of(path)
    if step is None:
        raise ValueError(f"{path} is not named global_step_N; cannot tell which step it holds.")
    return step
