"""A truncated worker shard (issue 21, finding 4): loading names the file and the previous complete step instead of
torch's bare "PytorchStreamReader failed reading zip archive". Real FSDPCheckpointManager on one gloo rank."""

import os

import pytest
from config_testlib import compose_section
from engine_testlib import build_training_setup, single_rank_group

from hybridrl.workers.engine import FSDPCheckpointManager
from hybridrl.workers.engine.checkpoint import CheckpointShardError

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
