"""Driver side of checkpoint and resume, in verl's layout: the trainer's :class:`Checkpointer` part.

    {default_local_dir}/
      latest_checkpointed_iteration.txt      written last, atomically: a crash mid-save is never resumed from
      global_step_{N}/
        actor/  critic/                      written by the workers (FSDPCheckpointManager)
        data.pt                              StatefulDataLoader state
        trainer_state.pt                     hybridrl addition: KL controller value, driver RNG states
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

from hybridrl.utils.checkpoint import COMPLETE_MARKER, is_checkpoint_complete
from hybridrl.utils.dataset.dataloader import load_dataloader_state

TRACKER_FILE = "latest_checkpointed_iteration.txt"
TRAINER_STATE_FILE = "trainer_state.pt"
DATALOADER_STATE_FILE = "data.pt"


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be resumed from (incomplete, corrupt or mismatched)."""


def _atomic_torch_save(obj: Any, path: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fp:
        fp.write(text)
        fp.flush()
        os.fsync(fp.fileno())
    os.replace(tmp, path)


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


def _load_driver_file(folder: str, name: str) -> Any:
    """``torch.load`` a driver file; an unreadable (truncated, corrupt) one is a CheckpointError naming it.

    ``weights_only=False``: the files hold numpy RNG state and sampler state written by this trainer itself.
    """
    path = os.path.join(folder, name)
    try:
        return torch.load(path, weights_only=False)
    except Exception as error:  # noqa: BLE001 - pickle/zip errors of any kind mean "corrupt"
        raise CheckpointError(
            f"{path} is corrupt ({type(error).__name__}: {error}). Resume from an earlier step with "
            "trainer.resume_mode=resume_path trainer.resume_from_path=<folder>, or start over with "
            "trainer.resume_mode=disable"
        ) from error


class Checkpointer:
    """Saves and restores a run in verl's layout under ``root`` (``trainer.default_local_dir``).

    Args:
        root: the checkpoint folder (``~`` expanded, made absolute).
        resume_mode: ``trainer.resume_mode``: ``auto`` (the latest checkpoint, if any), ``disable``, ``resume_path``.
        resume_from_path: ``trainer.resume_from_path``: a ``global_step_N`` folder, for ``resume_path``.
        max_actor_ckpt_to_keep / max_critic_ckpt_to_keep: ``trainer.max_{actor,critic}_ckpt_to_keep`` (None: all).
        del_local_ckpt_after_load: ``trainer.del_local_ckpt_after_load``.
    """

    def __init__(self, root: str, resume_mode: str, resume_from_path: str | None, *,
                 max_actor_ckpt_to_keep: int | None, max_critic_ckpt_to_keep: int | None,
                 del_local_ckpt_after_load: bool) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.resume_mode = resume_mode
        self.resume_from_path = resume_from_path
        self.max_actor_ckpt_to_keep = max_actor_ckpt_to_keep
        self.max_critic_ckpt_to_keep = max_critic_ckpt_to_keep
        self.del_local_ckpt_after_load = del_local_ckpt_after_load

    @classmethod
    def from_config(cls, trainer_config: Any) -> Checkpointer:
        """From the ``trainer`` section."""
        return cls(
            trainer_config.default_local_dir, trainer_config.resume_mode, trainer_config.resume_from_path,
            max_actor_ckpt_to_keep=trainer_config.max_actor_ckpt_to_keep,
            max_critic_ckpt_to_keep=trainer_config.max_critic_ckpt_to_keep,
            del_local_ckpt_after_load=trainer_config.del_local_ckpt_after_load,
        )

    def save(self, global_steps: int, workers: Any, train_dataloader: Any, kl_ctrl: Any = None) -> None:
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
        _atomic_torch_save(train_dataloader.state_dict(), os.path.join(step_folder, DATALOADER_STATE_FILE))
        kl_value = kl_ctrl.value if kl_ctrl is not None else None
        trainer_state = {"global_steps": global_steps, "kl_ctrl_value": kl_value, "rng": _driver_rng_state()}
        _atomic_torch_save(trainer_state, os.path.join(step_folder, TRAINER_STATE_FILE))
        _atomic_write_text(os.path.join(self.root, TRACKER_FILE), str(global_steps))

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
        """Every file the resume reads exists, and each worker component finished its save (its marker)."""
        components = ["actor"] + (["critic"] if use_critic else [])
        required = [DATALOADER_STATE_FILE, TRAINER_STATE_FILE, *components]
        missing = [name for name in required if not os.path.exists(os.path.join(folder, name))]
        missing += [f"{name}/{COMPLETE_MARKER}" for name in components
                    if os.path.isdir(os.path.join(folder, name))
                    and not is_checkpoint_complete(os.path.join(folder, name))]
        if missing:
            raise CheckpointError(
                f"checkpoint {folder} is incomplete (missing {missing}). Resume from an earlier step with "
                "trainer.resume_mode=resume_path trainer.resume_from_path=<folder>, or start over with "
                "trainer.resume_mode=disable"
            )

    def load(self, workers: Any, train_dataloader: Any, kl_ctrl: Any = None) -> int:
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
        dataloader_state = _load_driver_file(folder, DATALOADER_STATE_FILE)  # read first: a corrupt file fails
        state = _load_driver_file(folder, TRAINER_STATE_FILE)  # before any worker has loaded anything
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
