"""Driver side of checkpoint and resume, in verl's layout: the trainer's :class:`Checkpointer` part.

    {default_local_dir}/
      latest_checkpointed_iteration.txt      written last, atomically: a crash mid-save is never resumed from
      global_step_{N}/
        actor/  critic/                      written by the workers (FSDPCheckpointManager)
        data.json + data.safetensors         StatefulDataLoader state
        trainer_state.json + .safetensors    hybridrl addition: KL controller value, driver RNG states

The driver's files are JSON + safetensors (:mod:`hybridrl.utils.safe_state`): loading them runs
no code, so a crafted checkpoint folder cannot execute anything on resume. Checkpoints of earlier hybridrl
versions hold pickles instead (``data.pt``, ``trainer_state.pt``); they are refused unless
``trainer.allow_legacy_pickle_checkpoint=true`` (a warning; the next save writes the safe format).
"""

from __future__ import annotations

import logging
import os
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hybridrl.utils.checkpoint import (
    DATALOADER_STATE,
    LEGACY_SUFFIX,
    TRAINER_STATE,
    missing_resume_files,
    resume_elsewhere_hint,
    save_failure_message,
)
from hybridrl.utils.dataset.dataloader import load_dataloader_state
from hybridrl.utils.fs import atomic_write_text
from hybridrl.utils.safe_state import JSON_SUFFIX, load_state, save_state, state_exists

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from torchdata.stateful_dataloader import StatefulDataLoader

    from hybridrl.algos.kl import KLController
    from hybridrl.trainer.ppo.worker_groups import WorkerGroups

logger = logging.getLogger(__name__)

TRACKER_FILE = "latest_checkpointed_iteration.txt"
LEGACY_OPT_IN_KEY = "trainer.allow_legacy_pickle_checkpoint"


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be resumed from (incomplete, corrupt, mismatched or unsafe)."""


def find_latest_step_folder(root: str) -> str | None:
    """``root/global_step_N`` named by the tracker file, or None when there is no checkpoint yet."""
    tracker = os.path.join(root, TRACKER_FILE)
    if not os.path.exists(tracker):
        return None
    text = open(tracker, encoding="utf-8").read().strip()
    if not text.isdigit():
        raise CheckpointError(f"{tracker} is corrupt (content {text!r}); delete it or set trainer.resume_mode=disable")
    return os.path.join(root, f"global_step_{int(text)}")


def _driver_rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_driver_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _corrupt(path: str, error: Exception) -> CheckpointError:
    return CheckpointError(
        f"{path} is corrupt ({type(error).__name__}: {error}). Resume from an earlier step with "
        "trainer.resume_mode=resume_path trainer.resume_from_path=<folder>, or start over with "
        "trainer.resume_mode=disable"
    )


def _load_legacy_pickle(path: str, allow_legacy_pickle: bool) -> Any:
    """An earlier hybridrl version's pickle: refused unless the user opted in (it can run any code)."""
    if not allow_legacy_pickle:
        raise CheckpointError(
            f"{path} is a pickle (the format of hybridrl's earlier checkpoints); loading a pickle can run "
            "arbitrary code, so it is refused. If you wrote this checkpoint yourself with an earlier hybridrl, "
            f"resume once with {LEGACY_OPT_IN_KEY}=true (the next save writes the safe JSON + safetensors "
            "format); otherwise start over with trainer.resume_mode=disable"
        )
    logger.warning("loading %s with pickle because %s=true: only do this for checkpoints you wrote yourself",
                   path, LEGACY_OPT_IN_KEY)
    try:
        return torch.load(path, weights_only=False)
    except Exception as error:  # noqa: BLE001 - pickle/zip errors of any kind mean "corrupt"
        raise _corrupt(path, error) from error


def _load_driver_state(folder: str, prefix: str, allow_legacy_pickle: bool) -> Any:
    """The driver state ``prefix`` of ``folder``: the safe pair, else (opt-in only) the legacy pickle.

    An unreadable (truncated, corrupt) file is a CheckpointError naming it.
    """
    path = os.path.join(folder, prefix)
    if not state_exists(path):
        return _load_legacy_pickle(path + LEGACY_SUFFIX, allow_legacy_pickle)
    try:
        return load_state(path)
    except Exception as error:  # noqa: BLE001 - JSON/safetensors errors of any kind mean "corrupt"
        raise _corrupt(path + JSON_SUFFIX, error) from error


class Checkpointer:
    """Saves and restores a run in verl's layout under ``root`` (``trainer.default_local_dir``).

    Args:
        root: the checkpoint folder (``~`` expanded, made absolute).
        resume_mode: ``trainer.resume_mode``: ``auto`` (the latest checkpoint, if any), ``disable``, ``resume_path``.
        resume_from_path: ``trainer.resume_from_path``: a ``global_step_N`` folder, for ``resume_path``.
        max_actor_ckpt_to_keep / max_critic_ckpt_to_keep: ``trainer.max_{actor,critic}_ckpt_to_keep`` (None: all).
        del_local_ckpt_after_load: ``trainer.del_local_ckpt_after_load``.
        allow_legacy_pickle: ``trainer.allow_legacy_pickle_checkpoint``: read an earlier version's pickles.
    """

    def __init__(self, root: str, resume_mode: str, resume_from_path: str | None, *,
                 max_actor_ckpt_to_keep: int | None, max_critic_ckpt_to_keep: int | None,
                 del_local_ckpt_after_load: bool, allow_legacy_pickle: bool = False) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.resume_mode = resume_mode
        self.resume_from_path = resume_from_path
        self.max_actor_ckpt_to_keep = max_actor_ckpt_to_keep
        self.max_critic_ckpt_to_keep = max_critic_ckpt_to_keep
        self.del_local_ckpt_after_load = del_local_ckpt_after_load
        self.allow_legacy_pickle = allow_legacy_pickle

    @classmethod
    def from_config(cls, trainer_config: DictConfig) -> Checkpointer:
        """From the ``trainer`` section."""
        return cls(
            trainer_config.default_local_dir, trainer_config.resume_mode, trainer_config.resume_from_path,
            max_actor_ckpt_to_keep=trainer_config.max_actor_ckpt_to_keep,
            max_critic_ckpt_to_keep=trainer_config.max_critic_ckpt_to_keep,
            del_local_ckpt_after_load=trainer_config.del_local_ckpt_after_load,
            allow_legacy_pickle=bool(trainer_config.allow_legacy_pickle_checkpoint),
        )

    def save(self, global_steps: int, workers: WorkerGroups, train_dataloader: StatefulDataLoader,
             kl_ctrl: KLController | None = None) -> None:
        """Workers' model/optimizer shards, the dataloader position and the driver state, then the tracker file.

        Args:
            workers: a :class:`~hybridrl.trainer.ppo.worker_groups.WorkerGroups` (actor, and critic if any).
            kl_ctrl: the in-reward KL controller, whose value is saved (None: no KL in the reward).
        """
        step_folder = os.path.join(self.root, f"global_step_{global_steps}")
        os.makedirs(step_folder, exist_ok=True)
        print(f"[checkpoint] saving to {step_folder}", flush=True)
        workers.actor_rollout.save_checkpoint(
            os.path.join(step_folder, "actor"), None, global_steps, max_ckpt_to_keep=self.max_actor_ckpt_to_keep,
        )
        if workers.critic is not None:
            workers.critic.save_checkpoint(
                os.path.join(step_folder, "critic"), None, global_steps, max_ckpt_to_keep=self.max_critic_ckpt_to_keep,
            )
        kl_value = float(kl_ctrl.value) if kl_ctrl is not None else None
        trainer_state = {"global_steps": global_steps, "kl_ctrl_value": kl_value, "rng": _driver_rng_state()}
        try:
            save_state(train_dataloader.state_dict(), os.path.join(step_folder, DATALOADER_STATE))
            save_state(trainer_state, os.path.join(step_folder, TRAINER_STATE))
        except OSError as error:
            raise CheckpointError(save_failure_message(step_folder, error)) from error
        atomic_write_text(os.path.join(self.root, TRACKER_FILE), str(global_steps))

    def resolve_resume_folder(self) -> str | None:
        """The ``global_step_N`` folder to resume from, or None to train from scratch."""
        mode = self.resume_mode
        if mode == "disable":
            return None
        if mode == "auto":
            return find_latest_step_folder(self.root)
        if mode == "resume_path":
            path = self.resume_from_path
            if not path or "global_step_" not in str(path):
                raise CheckpointError(
                    f"trainer.resume_from_path={path!r} must point at a global_step_N folder "
                    "when trainer.resume_mode=resume_path"
                )
            return os.path.abspath(os.path.expanduser(str(path)))
        raise CheckpointError(f"trainer.resume_mode={mode!r}: expected one of auto, disable, resume_path")

    def check_complete(self, folder: str, use_critic: bool) -> None:
        """Every file the resume reads exists, and each worker component finished its save (its marker).

        Runs at resume start, before any worker loads (and in the preflight, before Ray): a deleted shard is named
        with the previous complete step to resume from, instead of failing in a worker after the models are built.
        """
        missing = missing_resume_files(folder, ["actor"] + (["critic"] if use_critic else []))
        if missing:
            raise CheckpointError(
                f"checkpoint {folder} is incomplete (missing {missing}); {resume_elsewhere_hint(folder)}"
            )

    def load(
        self, workers: WorkerGroups, train_dataloader: StatefulDataLoader, kl_ctrl: KLController | None = None
    ) -> int:
        """Restore workers, dataloader and driver state (KL value, RNGs); return the restored step (0: none)."""
        folder = self.resolve_resume_folder()
        if folder is None:
            print("[checkpoint] training from scratch", flush=True)
            return 0
        if not os.path.isdir(folder):
            raise CheckpointError(f"checkpoint folder {folder} does not exist")
        self.check_complete(folder, use_critic=workers.critic is not None)
        global_steps = int(folder.rstrip("/").split("global_step_")[-1])
        print(f"[checkpoint] resuming from {folder} (global step {global_steps})", flush=True)
        # read first: a corrupt or refused file fails before any worker has loaded anything
        dataloader_state = _load_driver_state(folder, DATALOADER_STATE, self.allow_legacy_pickle)
        state = _load_driver_state(folder, TRAINER_STATE, self.allow_legacy_pickle)
        delete_after = self.del_local_ckpt_after_load
        workers.actor_rollout.load_checkpoint(os.path.join(folder, "actor"), del_local_after_load=delete_after)
        if workers.critic is not None:
            workers.critic.load_checkpoint(os.path.join(folder, "critic"), del_local_after_load=delete_after)
        # Epoch-boundary safe: a state saved after an epoch's last batch starts the next epoch (not zero steps).
        load_dataloader_state(train_dataloader, dataloader_state)
        if kl_ctrl is not None and state.get("kl_ctrl_value") is not None:
            kl_ctrl.value = state["kl_ctrl_value"]
        _set_driver_rng_state(state["rng"])
        return global_steps
