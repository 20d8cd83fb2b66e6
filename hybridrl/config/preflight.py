"""Preflight: the checks that need the disk (not just the config) and can still run before Ray starts.

``validate_config`` checks the config itself; these read files, so they run once, in ``main_ppo.run_ppo``
right before ``init_ray`` (each well under 2 s on the shipped examples), and fail the run before any worker
starts with a ConfigError that names the key and the file:

    checkpoint folder     trainer.default_local_dir is writable (a probe file) when trainer.save_freq > 0
    resume                latest_checkpointed_iteration.txt is a step number (resume_mode=auto);
                          trainer.resume_from_path is an existing global_step_N folder (resume_mode=resume_path);
                          the folder resumed from has every file (:mod:`hybridrl.config.preflight_checkpoint`)
    datasets              every parquet file of data.train_files / data.val_files has rows, and (data.truncation
                          =error, no filter_overlong_prompts) every prompt fits data.max_prompt_length:
                          see :mod:`hybridrl.config.preflight_data`
    model weights         every *.safetensors file of the model folders holds the bytes its header declares;
                          the policy is a text model (multimodal RL is refused until the rollout and the
                          training forwards read images) (:mod:`hybridrl.config.preflight_model`)
    code files            custom_reward_function.path compiles (:mod:`hybridrl.config.preflight_code`)
    teachers              a distillation teacher's vocabulary is the student's (:mod:`hybridrl.config.preflight_teacher`)
"""

from __future__ import annotations

import os
import re

from omegaconf import DictConfig

from hybridrl.config.access import get
from hybridrl.config.errors import ConfigError, ConfigProblem
from hybridrl.config.preflight_checkpoint import TRACKER_FILENAME, check_resume_folder
from hybridrl.config.preflight_code import check_code_files
from hybridrl.config.preflight_data import check_datasets
from hybridrl.config.preflight_model import check_model_files, check_text_only_policy
from hybridrl.config.preflight_teacher import check_teacher_vocabulary

__all__ = ["check_checkpoint_folder", "check_resume_tracker", "preflight_problems", "run_preflight"]

_STEP_FOLDER = re.compile(r"^global_step_\d+$")


def run_preflight(config: DictConfig) -> None:
    """Raise ConfigError listing every problem :func:`preflight_problems` finds."""
    problems = preflight_problems(config)
    if problems:
        raise ConfigError(problems)


def preflight_problems(config: DictConfig) -> list[ConfigProblem]:
    """All disk-level problems of a composed ``ppo_trainer`` config."""
    return [
        *check_checkpoint_folder(config), *check_resume_tracker(config), *check_resume_folder(config),
        *check_model_files(config), *check_text_only_policy(config), *check_code_files(config),
        *check_datasets(config), *check_teacher_vocabulary(config),
    ]


def check_checkpoint_folder(config: DictConfig) -> list[ConfigProblem]:
    """When saving is on, ``trainer.default_local_dir`` can be created and written (probe file written, removed)."""
    save_freq = get(config, "trainer.save_freq")
    if not isinstance(save_freq, int) or save_freq <= 0:
        return []
    key = "trainer.default_local_dir"
    folder = os.path.abspath(os.path.expanduser(str(get(config, key))))
    probe = os.path.join(folder, f".hybridrl_write_probe.{os.getpid()}")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("probe")
        os.remove(probe)
    except OSError as error:
        return [ConfigProblem(
            key, f"checkpoints cannot be written to {folder} ({type(error).__name__}: {error.strerror or error}).",
            f"point {key} at a writable folder, or set trainer.save_freq=-1 to train without checkpoints.",
        )]
    return []


def check_resume_tracker(config: DictConfig) -> list[ConfigProblem]:
    """The checkpoint a resume would read is findable: a parseable tracker file, or an existing step folder."""
    mode = get(config, "trainer.resume_mode")
    if mode == "auto":
        tracker = os.path.join(os.path.expanduser(str(get(config, "trainer.default_local_dir"))), TRACKER_FILENAME)
        if not os.path.isfile(tracker):
            return []
        with open(tracker, encoding="utf-8", errors="replace") as handle:
            text = handle.read().strip()
        if text.isdigit():
            return []
        return [ConfigProblem(
            "trainer.resume_mode", f"the tracker file {tracker} is corrupt (content {text[:40]!r}, not a step number).",
            "write the step of a complete global_step_N folder into it, delete it to start over, or set "
            "trainer.resume_mode=disable (or resume_path with trainer.resume_from_path=<global_step_N folder>).",
        )]
    if mode == "resume_path":
        path = get(config, "trainer.resume_from_path")
        folder = os.path.abspath(os.path.expanduser(str(path))) if path else ""
        if path and os.path.isdir(folder) and _STEP_FOLDER.match(os.path.basename(folder.rstrip("/"))):
            return []
        return [ConfigProblem(
            "trainer.resume_from_path", f"{path!r} is not an existing global_step_N folder (trainer.resume_mode=resume_path).",
            "set it to a checkpoint folder such as <default_local_dir>/global_step_100, or use trainer.resume_mode=auto.",
        )]
    return []
