"""Checkpoint-folder helpers shared by every checkpoint manager (verl's ``BaseCheckpointManager`` part).

Layout (verl 0.5)::

    {default_local_dir}/
      latest_checkpointed_iteration.txt     the tracker: text "N", written by the trainer after a full save
      global_step_{N}/{actor,critic}/       one component folder per worker group
        ...                                 files of the component (see engine/checkpoint.py)
        checkpoint_complete.json            hybridrl: written last, after every rank finished writing

Completeness (hybridrl addition): a component folder counts only once its marker exists. Saving first
deletes the marker, so a crash mid-save (even one overwriting the same step) leaves a folder that
:func:`find_latest_ckpt_path` never picks.

RNG states are stored as tensors and plain Python values only, so ``torch.load(weights_only=True)``
reads them without an allow-list (numpy's ``MT19937`` key array is converted to a tensor).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybridrl.utils.fs import atomic_write_text
from hybridrl.utils.safe_state import JSON_SUFFIX, TENSORS_SUFFIX

CHECKPOINT_TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
COMPLETE_MARKER = "checkpoint_complete.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
# Files that make a folder recognisably a component checkpoint (for completeness checks).
_COMPONENT_FILE = re.compile(
    r"^(model|optim|extra_state)_world_size_\d+_rank_\d+\.pt$|^fsdp_config\.json$|^megatron_checkpoint\.json$"
)
# The driver's state in global_step_N (hybridrl.trainer.ppo.checkpointing): JSON + safetensors pairs by prefix
DATALOADER_STATE = "data"  # data.json + data.safetensors
TRAINER_STATE = "trainer_state"  # trainer_state.json + trainer_state.safetensors
LEGACY_SUFFIX = ".pt"  # earlier hybridrl versions: data.pt / trainer_state.pt, pickles
_SHARD_FILE = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
_FSDP_CONFIG_FILE = "fsdp_config.json"  # {"world_size": W}, written by rank 0 of an FSDP save


# ----------------------------------------------------------------------------- tracker and discovery


def get_checkpoint_tracker_filename(root_path: str) -> str:
    """``{root_path}/latest_checkpointed_iteration.txt``."""
    return os.path.join(root_path, CHECKPOINT_TRACKER_FILENAME)


def write_checkpoint_tracker(root_path: str, global_step: int) -> None:
    """Atomically record ``global_step`` as the latest checkpoint under ``root_path``."""
    atomic_write_text(get_checkpoint_tracker_filename(root_path), str(int(global_step)))


def read_checkpoint_tracker(root_path: str) -> int | None:
    """The step in the tracker file, or None if there is none. A corrupt tracker is an error."""
    tracker = get_checkpoint_tracker_filename(root_path)
    if not os.path.exists(tracker):
        return None
    text = Path(tracker).read_text().strip()
    if not text.isdigit():
        raise ValueError(f"{tracker} is corrupt (content {text!r}); delete it or set trainer.resume_mode=disable.")
    return int(text)


def mark_complete(path: str, **info: Any) -> None:
    """Write the completeness marker of a checkpoint folder (call it after everything else is on disk)."""
    payload = {"time": time.time(), **info}
    atomic_write_text(os.path.join(path, COMPLETE_MARKER), json.dumps(payload, sort_keys=True))


def clear_complete(path: str) -> None:
    """Remove the marker (first thing a save into an existing folder does)."""
    marker = Path(path) / COMPLETE_MARKER
    if marker.exists():
        marker.unlink()


def _looks_like_component(path: Path) -> bool:
    return path.is_dir() and any(_COMPONENT_FILE.match(child.name) for child in path.iterdir())


def is_checkpoint_complete(path: str) -> bool:
    """True when ``path`` (a component folder or a ``global_step_N`` folder) holds a finished checkpoint.

    A component folder is complete when it has the marker. A step folder is complete when it has the
    marker itself, or when it has at least one component subfolder and every component subfolder is
    complete.
    """
    folder = Path(path)
    if not folder.is_dir():
        return False
    if (folder / COMPLETE_MARKER).exists():
        return True
    components = [
        child for child in folder.iterdir() if _looks_like_component(child) or (child / COMPLETE_MARKER).exists()
    ]
    return bool(components) and all((child / COMPLETE_MARKER).exists() for child in components)


def list_step_dirs(root_path: str) -> list[tuple[int, str]]:
    """``[(N, path)]`` of ``global_step_N`` folders under ``root_path``, ascending by N."""
    root = Path(root_path)
    if not root.is_dir():
        return []
    steps = [(int(m.group(1)), str(child)) for child in root.iterdir() if (m := _STEP_DIR.match(child.name))]
    return sorted(steps)


def find_latest_ckpt_path(path: str | None, directory_format: str = "global_step_{}") -> str | None:
    """The folder to resume from under ``path`` (verl's name), or None.

    Reads the tracker (verl). If the tracked folder is missing or incomplete, falls back to the newest
    complete ``global_step_M`` with ``M`` below the tracked step. Without a tracker file: None, as verl.
    """
    if path is None:
        return None
    step = read_checkpoint_tracker(path)
    if step is None:
        print(f"[checkpoint] tracker file {get_checkpoint_tracker_filename(path)} not found", flush=True)
        return None
    tracked = os.path.join(path, directory_format.format(step))
    if is_checkpoint_complete(tracked):
        return tracked
    for older, folder in reversed(list_step_dirs(path)):
        if older < step and is_checkpoint_complete(folder):
            print(f"[checkpoint] {tracked} is incomplete; using {folder}", flush=True)
            return folder
    print(f"[checkpoint] {tracked} is incomplete and no older complete checkpoint exists", flush=True)
    return None


def missing_shard_files(component: str) -> list[str]:
    """Names of the per-rank files an FSDP component folder lacks (a shard deleted or never copied).

    Every kind (``model``, ``optim``, ``extra_state``) that one rank saved must exist for every rank of the saved
    world size (``fsdp_config.json``); ``model`` is always saved. A folder of another layout (Megatron) gives [].
    """
    config_path = os.path.join(component, _FSDP_CONFIG_FILE)
    if not os.path.isfile(config_path):
        return []
    try:
        with open(config_path, encoding="utf-8") as handle:
            world_size = int(json.load(handle)["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return []  # an unreadable fsdp_config.json is the loader's to report
    matches = map(_SHARD_FILE.match, os.listdir(component))
    shards = {(match.group(1), int(match.group(2)), int(match.group(3))) for match in matches if match}
    kinds = {kind for kind, _, _ in shards} | {"model"}
    return [
        f"{kind}_world_size_{world_size}_rank_{rank}.pt"
        for kind in sorted(kinds)
        for rank in range(world_size)
        if (kind, world_size, rank) not in shards
    ]


def missing_resume_files(folder: str, components: list[str]) -> list[str]:
    """Paths (relative to the ``global_step_N`` ``folder``) a resume would read but cannot: the driver's state
    pairs, each component folder, its completeness marker and every rank's shards."""
    missing = [name for prefix in (DATALOADER_STATE, TRAINER_STATE) for name in _missing_driver_files(folder, prefix)]
    for name in components:
        component = os.path.join(folder, name)
        if not os.path.exists(component):
            missing.append(name)
        elif not is_checkpoint_complete(component):
            missing.append(f"{name}/{COMPLETE_MARKER}")
        missing += [f"{name}/{shard}" for shard in missing_shard_files(component)]
    return missing


def _missing_driver_files(folder: str, prefix: str) -> list[str]:
    """The files of the safe pair ``prefix`` that ``folder`` lacks ([] when an earlier version's pickle stands in)."""
    missing = [
        prefix + suffix
        for suffix in (JSON_SUFFIX, TENSORS_SUFFIX)
        if not os.path.exists(os.path.join(folder, prefix + suffix))
    ]
    if len(missing) == 2 and os.path.exists(os.path.join(folder, prefix + LEGACY_SUFFIX)):
        return []
    return missing


def resume_elsewhere_hint(step_folder: str) -> str:
    """What to do when ``{root}/global_step_N`` cannot be resumed: the newest complete earlier step, or start over."""
    step, root = step_of(step_folder), os.path.dirname(os.path.abspath(step_folder))
    earlier = [
        folder for n, folder in list_step_dirs(root) if step is not None and n < step and is_checkpoint_complete(folder)
    ]
    if earlier:
        return (
            "resume from the previous complete step: trainer.resume_mode=resume_path "
            f"trainer.resume_from_path={earlier[-1]}"
        )
    return f"no earlier complete checkpoint exists under {root}; start over with trainer.resume_mode=disable"


def save_failure_message(folder: str, error: OSError) -> str:
    """Why saving into ``folder`` failed and the way out; the earlier checkpoints and the tracker are untouched."""
    reason = error.strerror or str(error)
    return (
        f"saving the checkpoint into {folder} failed ({type(error).__name__}: {reason}); its temporary files were "
        "removed, the earlier checkpoints and latest_checkpointed_iteration.txt are unchanged. Free space on that "
        "disk (or point trainer.default_local_dir at one with room, or keep fewer checkpoints with "
        "trainer.max_actor_ckpt_to_keep / trainer.max_critic_ckpt_to_keep) and resume with trainer.resume_mode=auto."
    )


# ----------------------------------------------------------------------------- rotation


def step_of(path: str) -> int | None:
    """N for ``.../global_step_N`` or ``.../global_step_N/<component>``, else None."""
    for part in reversed(Path(path).parts[-2:]):
        match = _STEP_DIR.match(part)
        if match:
            return int(match.group(1))
    return None


def rotate_component_checkpoints(local_path: str, max_ckpt_to_keep: int | None) -> list[str]:
    """Keep the newest ``max_ckpt_to_keep`` complete copies of this component; delete older ones.

    ``local_path`` is ``{root}/global_step_N/{component}`` (just saved). Older ``global_step_M/{component}``
    folders beyond the limit are removed (verl removes the component folder); a step folder left
    empty is removed too. Runs after the new save completed, so a crash never leaves zero checkpoints.
    ``None`` or ``<= 0`` keeps everything. Returns the removed paths.
    """
    if not max_ckpt_to_keep or max_ckpt_to_keep <= 0:
        return []
    component = Path(local_path).name
    step_dir = Path(local_path).parent
    if _STEP_DIR.match(step_dir.name) is None:
        return []
    saved = [
        os.path.join(folder, component)
        for _, folder in list_step_dirs(str(step_dir.parent))
        if is_checkpoint_complete(os.path.join(folder, component))
    ]
    removed = saved[: max(0, len(saved) - max_ckpt_to_keep)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
        parent = Path(path).parent
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
    return removed


# ----------------------------------------------------------------------------- RNG state


def get_rng_state() -> dict[str, Any]:
    """RNG states of python, numpy, torch CPU (and CUDA when available), weights_only-loadable."""
    numpy_state: Any = np.random.get_state()
    kind, keys, pos, has_gauss, cached_gaussian = numpy_state
    state: dict[str, Any] = {
        "cpu": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached_gaussian)),
        "random": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` returned (CUDA only when saved and available)."""
    torch.set_rng_state(state["cpu"])
    kind, keys, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, cached_gaussian))
    version, internal, gauss = state["random"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
