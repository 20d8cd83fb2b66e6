"""Issue 21 finding 1: a crafted pickle in a checkpoint folder must not run on resume.

The driver state is JSON + safetensors now; an earlier version's pickled data.pt / trainer_state.pt is
refused (naming the opt-in key) and read only with trainer.allow_legacy_pickle_checkpoint=true.
"""

from __future__ import annotations

import json
import os
import random
import struct

import numpy as np
import pytest
import torch
from config_testlib import compose_config

from hybridrl.trainer.ppo.checkpointing import Checkpointer, CheckpointError
from hybridrl.trainer.ppo.worker_groups import WorkerGroups
from hybridrl.utils.checkpoint import mark_complete, write_checkpoint_tracker
from hybridrl.utils.safe_state import save_state


class RunsShellCommand:
    """Unpickling this runs ``touch <marker>`` (what a crafted checkpoint file would do)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _NoWorkers:
    """Worker groups that must never be reached: resume has to fail on the driver files first."""

    def load_checkpoint(self, *args, **kwargs):
        raise AssertionError("a worker loaded its shards although the driver files were refused")


def _legacy_step_folder(root, data_obj, state_obj, step: int = 3) -> str:
    """A complete ``global_step_N`` in the earlier layout: pickled data.pt / trainer_state.pt (via torch.save)."""
    folder = os.path.join(root, f"global_step_{step}")
    os.makedirs(os.path.join(folder, "actor"))
    mark_complete(os.path.join(folder, "actor"))
    torch.save(data_obj, os.path.join(folder, "data.pt"))
    torch.save(state_obj, os.path.join(folder, "trainer_state.pt"))
    write_checkpoint_tracker(str(root), step)
    return folder


def _checkpointer(root, path, allow_legacy_pickle: bool) -> Checkpointer:
    return Checkpointer(str(root), "resume_path", path, max_actor_ckpt_to_keep=None, max_critic_ckpt_to_keep=None,
                        del_local_ckpt_after_load=False, allow_legacy_pickle=allow_legacy_pickle)


@pytest.mark.parametrize("crafted", ["data.pt", "trainer_state.pt"])
def test_crafted_pickle_in_checkpoint_is_refused_and_never_runs(tmp_path, crafted):
    marker = tmp_path / "pwned"
    payload = RunsShellCommand(str(marker))
    benign_data, benign_state = {}, {"global_steps": 3, "kl_ctrl_value": None, "rng": None}
    folder = _legacy_step_folder(tmp_path / "ckpt", payload if crafted == "data.pt" else benign_data,
                                 payload if crafted == "trainer_state.pt" else benign_state)
    workers = WorkerGroups(actor_rollout=_NoWorkers(), critic=None)
    with pytest.raises(CheckpointError, match=r"is a pickle.*trainer\.allow_legacy_pickle_checkpoint=true"):
        _checkpointer(tmp_path / "ckpt", folder, allow_legacy_pickle=False).load(workers, train_dataloader=None)
    assert not marker.exists(), "the crafted pickle ran"
    # A safe pair next to the pickle wins: the pickle is never opened.
    save_state(benign_data, os.path.join(folder, "data"))
    save_state(benign_state, os.path.join(folder, "trainer_state"))
    workers.actor_rollout.load_checkpoint = lambda *args, **kwargs: None
    with pytest.raises(AttributeError):  # gets as far as the (absent) dataloader: both driver files were read
        _checkpointer(tmp_path / "ckpt", folder, allow_legacy_pickle=False).load(workers, train_dataloader=None)
    assert not marker.exists()


def test_crafted_pickle_via_the_trainer_config_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    folder = _legacy_step_folder(tmp_path / "ckpt", RunsShellCommand(str(marker)), {})
    config = compose_config("ppo_trainer", [f"trainer.default_local_dir={tmp_path / 'ckpt'}"])
    assert config.trainer.allow_legacy_pickle_checkpoint is False  # the shipped default refuses pickles
    checkpointer = Checkpointer.from_config(config.trainer)  # resume_mode=auto finds global_step_3
    with pytest.raises(CheckpointError, match=f"{folder}/data.pt is a pickle"):
        checkpointer.load(WorkerGroups(actor_rollout=_NoWorkers(), critic=None), train_dataloader=None)
    assert not marker.exists()


class _Loader:
    def __init__(self) -> None:
        self.state = None

    def load_state_dict(self, state):
        self.state = state

    def __len__(self) -> int:
        return 10


def test_earlier_pickled_checkpoint_loads_only_with_the_opt_in(tmp_path, caplog):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    expected = random.random(), float(np.random.rand()), torch.rand(2)
    data = {"_num_yielded": 2, "_iterator_finished": False, "_sampler_iter_state": {"samples_yielded": 4}}
    folder = _legacy_step_folder(tmp_path / "ckpt", data, {"global_steps": 3, "kl_ctrl_value": None, "rng": rng})
    workers = WorkerGroups(actor_rollout=_NoWorkers(), critic=None)
    with pytest.raises(CheckpointError, match="data.pt is a pickle"):
        _checkpointer(tmp_path / "ckpt", folder, allow_legacy_pickle=False).load(workers, train_dataloader=_Loader())
    workers.actor_rollout.load_checkpoint = lambda *args, **kwargs: None
    loader = _Loader()
    with caplog.at_level("WARNING"):
        assert _checkpointer(tmp_path / "ckpt", folder, allow_legacy_pickle=True).load(workers, loader) == 3
    assert "allow_legacy_pickle_checkpoint=true" in caplog.text and "data.pt" in caplog.text
    assert loader.state == data
    draws = random.random(), float(np.random.rand()), torch.rand(2)
    assert draws[:2] == expected[:2] and torch.equal(draws[2], expected[2])


def test_checkpoint_save_writes_no_pickle(tmp_path):
    """The files a save writes are JSON and safetensors (an 8-byte header length, then a JSON header)."""

    class _Actor:
        def save_checkpoint(self, path, *args, **kwargs):
            os.makedirs(path, exist_ok=True)
            mark_complete(path)

    class _SavingLoader:
        def state_dict(self):
            return {"_num_yielded": 1, "_sampler_iter_state": {"samples_yielded": 2}, "gen": torch.arange(3)}

    checkpointer = _checkpointer(tmp_path, None, allow_legacy_pickle=False)
    checkpointer.save(5, WorkerGroups(actor_rollout=_Actor(), critic=None), _SavingLoader())
    folder = tmp_path / "global_step_5"
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    assert names == ["data.json", "data.safetensors", "trainer_state.json", "trainer_state.safetensors"]
    assert json.loads((folder / "data.json").read_text())["state"]["_num_yielded"] == 1
    assert json.loads((folder / "trainer_state.json").read_text())["state"]["global_steps"] == 5
    for name in ("data.safetensors", "trainer_state.safetensors"):
        raw = (folder / name).read_bytes()
        header_len = struct.unpack("<Q", raw[:8])[0]
        assert 8 + header_len <= len(raw) and isinstance(json.loads(raw[8:8 + header_len]), dict), name
