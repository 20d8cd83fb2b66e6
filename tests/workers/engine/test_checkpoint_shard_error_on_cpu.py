"""A truncated worker shard (issue 21, finding 4): loading names the file and the previous complete step instead of
torch's bare "PytorchStreamReader failed reading zip archive". Real FSDPCheckpointManager on one gloo rank."""

import errno
import io
import os

import pytest
import torch
from config_testlib import compose_section
from engine_testlib import build_training_setup, single_rank_group

from hybridrl.workers.engine import FSDPCheckpointManager, checkpoint
from hybridrl.workers.engine.checkpoint import CheckpointSaveError, CheckpointShardError

CONTENTS = compose_section("actor_rollout_ref.actor.checkpoint")


@pytest.fixture(scope="module", autouse=True)
def gloo_group():
    with single_rank_group():
        yield


def _truncate(path: str) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)


def test_truncated_model_shard_names_the_file_and_the_previous_complete_step(tiny_model_dir, tmp_path):
    module, optimizer, scheduler, tokenizer = build_training_setup(tiny_model_dir)
    manager = FSDPCheckpointManager(module, optimizer, scheduler, tokenizer, checkpoint_config=CONTENTS)
    for step in (1, 2):
        manager.save_checkpoint(str(tmp_path / f"global_step_{step}" / "actor"), global_step=step)
    shard = str(tmp_path / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt")
    _truncate(shard)  # e.g. a disk that filled up while another process copied the folder
    with pytest.raises(CheckpointShardError) as raised:
        manager.load_checkpoint(str(tmp_path / "global_step_2" / "actor"))
    message = str(raised.value)
    assert message.startswith(f"cannot read checkpoint file {shard} (RuntimeError: ")
    assert "truncated or corrupt" in message
    assert f"trainer.resume_from_path={tmp_path / 'global_step_1'}" in message


def test_truncated_shard_without_an_earlier_step_says_start_over(tiny_model_dir, tmp_path):
    module, optimizer, scheduler, tokenizer = build_training_setup(tiny_model_dir)
    manager = FSDPCheckpointManager(module, optimizer, scheduler, tokenizer, checkpoint_config=CONTENTS)
    manager.save_checkpoint(str(tmp_path / "global_step_1" / "actor"), global_step=1)
    _truncate(str(tmp_path / "global_step_1" / "actor" / "optim_world_size_1_rank_0.pt"))
    with pytest.raises(CheckpointShardError, match="optim_world_size_1_rank_0.pt .*trainer.resume_mode=disable"):
        manager.load_checkpoint(str(tmp_path / "global_step_1" / "actor"))


class _FullDisk(io.FileIO):
    """A file on a disk that fills up after ``budget`` bytes: later writes raise ENOSPC, as the kernel does."""

    budget = 4096

    def write(self, data) -> int:
        if _FullDisk.budget < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        _FullDisk.budget -= len(data)
        return super().write(data)


def test_full_disk_while_saving_removes_the_temporary_files_and_names_the_folder(tiny_model_dir, tmp_path, monkeypatch):
    from hybridrl.utils.checkpoint import is_checkpoint_complete, read_checkpoint_tracker, write_checkpoint_tracker

    module, optimizer, scheduler, tokenizer = build_training_setup(tiny_model_dir)
    manager = FSDPCheckpointManager(module, optimizer, scheduler, tokenizer, checkpoint_config=CONTENTS)
    manager.save_checkpoint(str(tmp_path / "global_step_1" / "actor"), global_step=1)
    write_checkpoint_tracker(str(tmp_path), 1)
    before = sorted(path.name for path in (tmp_path / "global_step_1" / "actor").iterdir())
    monkeypatch.setattr(checkpoint, "open", lambda path, mode: _FullDisk(path, mode), raising=False)
    folder = tmp_path / "global_step_2" / "actor"
    with pytest.raises(CheckpointSaveError) as raised:
        manager.save_checkpoint(str(folder), global_step=2)
    message = str(raised.value)
    assert message.startswith(f"saving the checkpoint into {folder} failed (OSError: No space left on device)")
    assert "Free space on that disk" in message and "trainer.default_local_dir" in message
    assert [path for path in tmp_path.rglob("*") if ".tmp" in path.name] == []  # before: model_...pt.tmp stayed
    assert not is_checkpoint_complete(str(folder))  # never resumed from
    assert sorted(path.name for path in (tmp_path / "global_step_1" / "actor").iterdir()) == before
    assert read_checkpoint_tracker(str(tmp_path)) == 1


class _RunsShellCommand:
    """Unpickling this runs ``touch <marker>``: what a crafted shard would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_crafted_shard_is_refused_without_suggesting_to_unpickle_it(tiny_model_dir, tmp_path):
    module, optimizer, scheduler, tokenizer = build_training_setup(tiny_model_dir)
    manager = FSDPCheckpointManager(module, optimizer, scheduler, tokenizer, checkpoint_config=CONTENTS)
    for step in (1, 2):
        manager.save_checkpoint(str(tmp_path / f"global_step_{step}" / "actor"), global_step=step)
    marker = tmp_path / "pwned"
    shard = tmp_path / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt"
    torch.save({"weight": _RunsShellCommand(str(marker))}, shard)
    with pytest.raises(CheckpointShardError) as raised:
        manager.load_checkpoint(str(shard.parent))
    message = str(raised.value)
    assert not marker.exists()
    assert message.startswith(f"refused to load checkpoint file {shard}: it holds Python objects that are not tensors")
    assert f"GLOBAL {os.system.__module__}.system" in message  # the object torch refused, named
    assert f"trainer.resume_from_path={tmp_path / 'global_step_1'}" in message
    # torch's own message advises weights_only=False ("will likely succeed"), which would run the payload
    assert "weights_only" not in message and "likely succeed" not in message
