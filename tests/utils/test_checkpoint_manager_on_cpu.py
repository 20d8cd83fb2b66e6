"""Checkpoint folder helpers: tracker, completeness marker, latest-checkpoint discovery, rotation, RNG state."""

import json
import random

import numpy as np
import pytest
import torch

from hybridrl.utils.checkpoint import (
    COMPLETE_MARKER,
    find_latest_ckpt_path,
    get_checkpoint_tracker_filename,
    get_rng_state,
    is_checkpoint_complete,
    mark_complete,
    read_checkpoint_tracker,
    rotate_component_checkpoints,
    set_rng_state,
    step_of,
    write_checkpoint_tracker,
)


def _component(root, step, name="actor", complete=True):
    """A fake component folder with one rank file (and the marker when ``complete``)."""
    folder = root / f"global_step_{step}" / name
    folder.mkdir(parents=True)
    (folder / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    if complete:
        mark_complete(str(folder), global_step=step)
    return folder


def test_tracker_roundtrip_and_corrupt_tracker(tmp_path):
    assert read_checkpoint_tracker(str(tmp_path)) is None
    write_checkpoint_tracker(str(tmp_path), 7)
    assert get_checkpoint_tracker_filename(str(tmp_path)).endswith("latest_checkpointed_iteration.txt")
    assert read_checkpoint_tracker(str(tmp_path)) == 7
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("seven")
    with pytest.raises(ValueError, match="corrupt"):
        read_checkpoint_tracker(str(tmp_path))


def test_completeness_of_component_and_step_folders(tmp_path):
    actor = _component(tmp_path, 1, "actor")
    assert is_checkpoint_complete(str(actor))
    assert json.loads((actor / COMPLETE_MARKER).read_text())["global_step"] == 1
    assert is_checkpoint_complete(str(tmp_path / "global_step_1"))
    _component(tmp_path, 1, "critic", complete=False)  # critic save crashed
    assert not is_checkpoint_complete(str(tmp_path / "global_step_1"))
    assert not is_checkpoint_complete(str(tmp_path / "global_step_9"))  # missing folder
    (tmp_path / "global_step_2").mkdir()
    assert not is_checkpoint_complete(str(tmp_path / "global_step_2"))  # empty folder


def test_find_latest_uses_tracker_and_ignores_partial_saves(tmp_path):
    assert find_latest_ckpt_path(str(tmp_path)) is None  # no tracker: verl returns None
    assert find_latest_ckpt_path(None) is None
    _component(tmp_path, 2)
    _component(tmp_path, 4)
    write_checkpoint_tracker(str(tmp_path), 4)
    _component(tmp_path, 6, complete=False)  # crash mid-save of step 6 (tracker not yet updated)
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_4")
    write_checkpoint_tracker(str(tmp_path), 6)  # even a tracker naming the partial folder
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_4")


def test_rotation_keeps_the_newest_n_complete_checkpoints(tmp_path):
    for step in (1, 2, 3, 4):
        _component(tmp_path, step)
    (tmp_path / "global_step_1" / "data.pt").write_bytes(b"d")  # other content of a step survives
    removed = rotate_component_checkpoints(str(tmp_path / "global_step_4" / "actor"), 2)
    assert sorted(removed) == [str(tmp_path / "global_step_1" / "actor"), str(tmp_path / "global_step_2" / "actor")]
    assert (tmp_path / "global_step_1" / "data.pt").exists()
    assert not (tmp_path / "global_step_2").exists()  # emptied step folder removed
    assert (tmp_path / "global_step_3" / "actor").exists() and (tmp_path / "global_step_4" / "actor").exists()
    assert rotate_component_checkpoints(str(tmp_path / "global_step_4" / "actor"), None) == []


def test_step_of():
    assert step_of("/ckpt/global_step_12/actor") == 12
    assert step_of("/ckpt/global_step_3") == 3
    assert step_of("/ckpt/other") is None


def test_rng_state_roundtrip_through_weights_only_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    torch.save(get_rng_state(), tmp_path / "rng.pt")
    first = (random.random(), np.random.rand(3).tolist(), torch.rand(3))
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))  # no allow-list needed
    second = (random.random(), np.random.rand(3).tolist(), torch.rand(3))
    assert first[0] == second[0] and first[1] == second[1] and torch.equal(first[2], second[2])
