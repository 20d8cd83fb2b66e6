"""Checkpoint folder helpers (tracker file, completeness marker, rotation, RNG state)."""

from hybridrl.utils.checkpoint.checkpoint_manager import (
    CHECKPOINT_TRACKER_FILENAME,
    COMPLETE_MARKER,
    clear_complete,
    find_latest_ckpt_path,
    get_checkpoint_tracker_filename,
    get_rng_state,
    is_checkpoint_complete,
    list_step_dirs,
    mark_complete,
    read_checkpoint_tracker,
    rotate_component_checkpoints,
    set_rng_state,
    step_of,
    write_checkpoint_tracker,
)

__all__ = [
    "CHECKPOINT_TRACKER_FILENAME",
    "COMPLETE_MARKER",
    "clear_complete",
    "find_latest_ckpt_path",
    "get_checkpoint_tracker_filename",
    "get_rng_state",
    "is_checkpoint_complete",
    "list_step_dirs",
    "mark_complete",
    "read_checkpoint_tracker",
    "rotate_component_checkpoints",
    "set_rng_state",
    "step_of",
    "write_checkpoint_tracker",
]
