"""Driver side of checkpoint and resume, in verl's layout.

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


class CheckpointMixin:
    config: Any

    @property
    def _checkpoint_root(self) -> str:
        return os.path.abspath(os.path.expanduser(self.config.trainer.default_local_dir))

    def _save_checkpoint(self) -> None:
        trainer_cfg = self.config.trainer
        step_folder = os.path.join(self._checkpoint_root, f"global_step_{self.global_steps}")
        os.makedirs(step_folder, exist_ok=True)
        print(f"[checkpoint] saving to {step_folder}", flush=True)
        self.actor_rollout_wg.save_checkpoint(
            os.path.join(step_folder, "actor"), None, self.global_steps,
            max_ckpt_to_keep=trainer_cfg.get("max_actor_ckpt_to_keep", None),
        )
        if self.use_critic:
            self.critic_wg.save_checkpoint(
                os.path.join(step_folder, "critic"), None, self.global_steps,
                max_ckpt_to_keep=trainer_cfg.get("max_critic_ckpt_to_keep", None),
            )
        _atomic_torch_save(self.train_dataloader.state_dict(), os.path.join(step_folder, DATALOADER_STATE_FILE))
        kl_value = self.kl_ctrl_in_reward.value if self.kl_ctrl_in_reward is not None else None
        trainer_state = {"global_steps": self.global_steps, "kl_ctrl_value": kl_value, "rng": _driver_rng_state()}
        _atomic_torch_save(trainer_state, os.path.join(step_folder, TRAINER_STATE_FILE))
        _atomic_write_text(os.path.join(self._checkpoint_root, TRACKER_FILE), str(self.global_steps))

    def _resolve_resume_folder(self) -> str | None:
        mode = self.config.trainer.resume_mode
        if mode == "disable":
            return None
        if mode == "auto":
            return find_latest_step_folder(self._checkpoint_root)
        if mode == "resume_path":
            path = self.config.trainer.resume_from_path
            if not path or "global_step_" not in str(path):
                raise CheckpointError(
                    f"trainer.resume_from_path={path!r} must point at a global_step_N folder "
                    "when trainer.resume_mode=resume_path"
                )
            return os.path.abspath(os.path.expanduser(str(path)))
        raise CheckpointError(f"trainer.resume_mode={mode!r}: expected one of auto, disable, resume_path")

    def _check_complete(self, folder: str) -> None:
        """Every file the resume reads exists, and each worker component finished its save (its marker)."""
        components = ["actor"] + (["critic"] if self.use_critic else [])
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

    def _load_checkpoint(self) -> int:
        """Restore workers, dataloader and driver state; return the restored global step (0 when none)."""
        folder = self._resolve_resume_folder()
        if folder is None:
            print("[checkpoint] training from scratch", flush=True)
            return 0
        if not os.path.isdir(folder):
            raise CheckpointError(f"checkpoint folder {folder} does not exist")
        self._check_complete(folder)
        global_steps = int(folder.rstrip("/").split("global_step_")[-1])
        print(f"[checkpoint] resuming from {folder} (global step {global_steps})", flush=True)
        dataloader_state = _load_driver_file(folder, DATALOADER_STATE_FILE)  # read first: a corrupt file fails
        state = _load_driver_file(folder, TRAINER_STATE_FILE)  # before any worker has loaded anything
        delete_after = self.config.trainer.del_local_ckpt_after_load
        self.actor_rollout_wg.load_checkpoint(os.path.join(folder, "actor"), del_local_after_load=delete_after)
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(folder, "critic"), del_local_after_load=delete_after)
        # Epoch-boundary safe: a state saved after an epoch's last batch starts the next epoch (not zero steps).
        load_dataloader_state(self.train_dataloader, dataloader_state)
        if self.kl_ctrl_in_reward is not None and state.get("kl_ctrl_value") is not None:
            self.kl_ctrl_in_reward.value = state["kl_ctrl_value"]
        _set_driver_rng_state(state["rng"])
        return global_steps
