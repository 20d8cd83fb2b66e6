"""Preflight of the checkpoint a resume would read: every file of it is there, found before Ray starts.

Without it a deleted worker shard surfaced in a worker after Ray, the workers and the models had started (minutes
into a large run), as a bare "file is missing". The check is the one the trainer repeats at resume start
(:func:`hybridrl.utils.checkpoint.missing_resume_files`): the driver's state pairs, each component folder,
its completeness marker and every rank's shards; the message names the previous complete step.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from hybridrl.config.access import get, need_critic
from hybridrl.config.errors import ConfigProblem

__all__ = ["TRACKER_FILENAME", "check_resume_folder", "resume_folder"]

# The trainer's tracker file (hybridrl.utils.checkpoint.CHECKPOINT_TRACKER_FILENAME; that module imports torch).
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"


def resume_folder(config: DictConfig) -> str | None:
    """The ``global_step_N`` folder the run would resume from, when it exists (None: none, or not resuming)."""
    mode = get(config, "trainer.resume_mode")
    folder = None
    if mode == "auto":
        root = os.path.abspath(os.path.expanduser(str(get(config, "trainer.default_local_dir"))))
        tracker = os.path.join(root, TRACKER_FILENAME)
        if os.path.isfile(tracker):
            with open(tracker, encoding="utf-8", errors="replace") as handle:
                text = handle.read().strip()
            folder = os.path.join(root, f"global_step_{text}") if text.isdigit() else None
    elif mode == "resume_path" and get(config, "trainer.resume_from_path"):
        folder = os.path.abspath(os.path.expanduser(str(get(config, "trainer.resume_from_path"))))
    return folder if folder is not None and os.path.isdir(folder) else None


def check_resume_folder(config: DictConfig) -> list[ConfigProblem]:
    """The files of the checkpoint a resume would read, all present (a corrupt tracker is reported elsewhere)."""
    folder = resume_folder(config)
    if folder is None:
        return []
    from hybridrl.utils.checkpoint import missing_resume_files, resume_elsewhere_hint  # torch: only when resuming

    missing = missing_resume_files(folder, ["actor"] + (["critic"] if need_critic(config) else []))
    if not missing:
        return []
    return [
        ConfigProblem(
            "trainer.resume_mode",
            f"the checkpoint to resume from, {folder}, is incomplete: missing {missing}.",
            resume_elsewhere_hint(folder) + ".",
        )
    ]
