"""Driver-side checkpoint and resume (the trainer's Checkpointer) with fake worker groups: resume_mode, trainer_state
(KL controller, driver RNG, dataloader position) and detection of a partial or corrupt latest checkpoint.
The CLI e2e tests (tests/trainer/test_main_ppo_e2e_on_cpu.py) cover the same with real workers and SIGTERM."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from config_testlib import compose_config

from hybridrl.trainer.ppo.checkpointing import Checkpointer, CheckpointError
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from hybridrl.trainer.ppo.worker_groups import WorkerGroups
from hybridrl.utils.checkpoint import mark_complete, write_checkpoint_tracker
from hybridrl.utils.safe_state import save_state
from tests.recipes.fakes import common_overrides, make_trainer


def _complete_component(path: str, *_args, **_kwargs) -> None:
    """What a worker's save_checkpoint leaves behind: a component folder with its completeness marker."""
    os.makedirs(path, exist_ok=True)
    mark_complete(path)


def _kl_trainer(model_dir, data_dir, tmp_path):
    overrides = {**common_overrides(model_dir, data_dir, tmp_path), "algorithm.adv_estimator": "grpo",
                 "algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.type": "adaptive",
                 "algorithm.kl_ctrl.target_kl": 0.1, "algorithm.kl_ctrl.horizon": 100}
    config = compose_config("ppo_trainer", [f"{k}={v}" for k, v in overrides.items()])
    trainer = make_trainer(RayPPOTrainer, config, use_ref=True)
    trainer.actor_rollout_wg.save_checkpoint = _complete_component
    trainer.actor_rollout_wg.load_checkpoint = lambda *args, **kwargs: None
    return trainer


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(3)


def test_trainer_state_restores_kl_controller_rng_and_dataloader_position(tiny_model_dir, arithmetic_data_dir,
                                                                          tmp_path):
    trainer = _kl_trainer(tiny_model_dir, arithmetic_data_dir, tmp_path)
    batches = iter(trainer.train_dataloader)
    next(batches)  # one step's batch consumed
    trainer.global_steps = 1
    trainer.kl_ctrl_in_reward.value = 0.0421  # as an adaptive controller leaves it after some steps
    trainer._save_checkpoint()
    expected_draws, expected_batch = _draws(), next(batches)["input_ids"]

    fresh = _kl_trainer(tiny_model_dir, arithmetic_data_dir, tmp_path)
    assert fresh.kl_ctrl_in_reward.value != 0.0421
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    assert fresh._load_checkpoint() == 1
    assert fresh.kl_ctrl_in_reward.value == 0.0421
    draws = _draws()
    assert draws[:2] == expected_draws[:2] and torch.equal(draws[2], expected_draws[2])
    assert torch.equal(next(iter(fresh.train_dataloader))["input_ids"], expected_batch)


class _Driver:
    """A Checkpointer for ``root`` and the worker groups it would restore (placeholders: none may be called)."""

    def __init__(self, root, mode="auto", path=None, use_critic=False):
        self.checkpointer = Checkpointer(str(root), mode, path, max_actor_ckpt_to_keep=None,
                                         max_critic_ckpt_to_keep=None, del_local_ckpt_after_load=False)
        self.workers = WorkerGroups(actor_rollout=object(), critic=object() if use_critic else None)

    def _resolve_resume_folder(self):
        return self.checkpointer.resolve_resume_folder()

    def _check_complete(self, folder):
        return self.checkpointer.check_complete(folder, use_critic=self.workers.use_critic)

    def _load_checkpoint(self):
        return self.checkpointer.load(self.workers, train_dataloader=None)


def _step_folder(root, step: int, components=("actor",), complete=True) -> str:
    folder = os.path.join(root, f"global_step_{step}")
    for name in components:
        os.makedirs(os.path.join(folder, name))
        open(os.path.join(folder, name, "model_world_size_1_rank_0.pt"), "wb").close()
        if complete:
            mark_complete(os.path.join(folder, name))
    save_state({}, os.path.join(folder, "data"))
    save_state({"rng": None}, os.path.join(folder, "trainer_state"))
    write_checkpoint_tracker(str(root), step)
    return folder


def test_resume_mode_auto_disable_resume_path(tmp_path):
    assert _Driver(tmp_path)._resolve_resume_folder() is None  # auto, no checkpoint yet: from scratch
    folder = _step_folder(tmp_path, 2)
    assert _Driver(tmp_path)._resolve_resume_folder() == folder
    assert _Driver(tmp_path, "disable")._resolve_resume_folder() is None
    other = _step_folder(tmp_path / "other", 1)
    assert _Driver(tmp_path, "resume_path", other)._resolve_resume_folder() == other
    with pytest.raises(CheckpointError, match="resume_from_path"):
        _Driver(tmp_path, "resume_path", str(tmp_path))._resolve_resume_folder()
    with pytest.raises(CheckpointError, match="resume_mode='sometimes'"):
        _Driver(tmp_path, "sometimes")._resolve_resume_folder()


def test_partial_or_corrupt_latest_checkpoint_is_reported(tmp_path):
    partial = _step_folder(tmp_path, 2, components=("actor", "critic"), complete=False)
    with pytest.raises(CheckpointError, match=r"global_step_2 is incomplete.*actor/checkpoint_complete.json"):
        _Driver(tmp_path, use_critic=True)._load_checkpoint()
    os.remove(os.path.join(partial, "data.json"))
    with pytest.raises(CheckpointError, match="data.json"):
        _Driver(tmp_path)._check_complete(partial)

    folder = _step_folder(tmp_path / "corrupt", 3)
    with open(os.path.join(folder, "data.json"), "w") as f:
        f.write('{"format": "hybridrl-safe-state-v1", "sta')
    with pytest.raises(CheckpointError, match="data.json is corrupt"):
        _Driver(tmp_path / "corrupt")._load_checkpoint()  # no worker group: it fails before any worker loads

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "latest_checkpointed_iteration.txt").write_text("2\x00")
    with pytest.raises(CheckpointError, match="corrupt"):
        _Driver(tmp_path / "bad")._resolve_resume_folder()


def _fsdp_shards(folder: str, world_size: int = 2) -> None:
    """The per-rank files and fsdp_config.json a ``world_size``-rank FSDP save leaves in ``folder/actor``."""
    actor = os.path.join(folder, "actor")
    with open(os.path.join(actor, "fsdp_config.json"), "w") as handle:
        json.dump({"FSDP_version": 2, "world_size": world_size}, handle)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world_size):
            open(os.path.join(actor, f"{kind}_world_size_{world_size}_rank_{rank}.pt"), "wb").close()


def test_deleted_shard_and_tensor_file_are_named_with_the_previous_complete_step(tmp_path):
    earlier, latest = _step_folder(tmp_path, 1), _step_folder(tmp_path, 2)
    _fsdp_shards(earlier), _fsdp_shards(latest)
    os.remove(os.path.join(latest, "actor", "optim_world_size_2_rank_1.pt"))
    os.remove(os.path.join(latest, "data.safetensors"))  # data.json is still there
    with pytest.raises(CheckpointError) as raised:
        _Driver(tmp_path)._load_checkpoint()  # no worker group: found before any worker loads
    message = str(raised.value)
    assert f"checkpoint {latest} is incomplete (missing ['data.safetensors', 'actor/optim_world_size_2_rank_1.pt'])" in message
    assert "data.json" not in message
    assert f"resume from the previous complete step: trainer.resume_mode=resume_path trainer.resume_from_path={earlier}" in message
