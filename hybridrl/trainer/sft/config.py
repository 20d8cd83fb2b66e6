"""Validate an ``sft_trainer.yaml`` config and derive the per-rank batch plan (before any model is loaded).

All problems are collected and raised together as one :class:`~hybridrl.config.ConfigError`
naming the dotted key and the fix (STYLE §11).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from hybridrl.config import ConfigError, ConfigProblem, check_unsupported

SCHEDULERS = ("cosine", "constant")
STRATEGIES = ("fsdp2", "fsdp")
DEVICES = ("cpu", "cuda")
RESUME_MODES = ("auto", "disable", "resume_path")
# Rows of the shared unsupported table that the SFT trainer implements now (see the report to the lead):
# multi-turn SFT runs through MultiTurnSFTDataset.
_IMPLEMENTED_NOW = ("data.multiturn.enable",)


@dataclass(frozen=True)
class SFTBatchPlan:
    """Samples per optimizer step: ``global`` = ``per_rank`` × dp = ``micro`` × ``grad_accum`` × dp.

    ``world_size`` = ``dp_size`` × ``sp_size``: the ``sp_size`` ranks of a Ulysses group share (slices of)
    the same samples, so "per rank" means per data-parallel rank, as in verl.
    """

    world_size: int
    global_batch: int
    per_rank_batch: int
    micro_batch: int
    grad_accum: int
    sp_size: int = 1

    @property
    def dp_size(self) -> int:
        return self.world_size // self.sp_size


def sequence_parallel_size(config: DictConfig) -> int:
    """The top-level ``ulysses_sequence_parallel_size`` (1 when unset)."""
    return int(config.ulysses_sequence_parallel_size or 1)


def _sequence_parallel_problems(config: DictConfig, world_size: int | None) -> list[ConfigProblem]:
    """SP > 1 needs ``use_remove_padding`` (Ulysses slices the packed row) and must divide the world size."""
    sp_size, problems = sequence_parallel_size(config), []
    if sp_size < 1:
        problems.append(ConfigProblem("ulysses_sequence_parallel_size", f"{sp_size} must be >= 1.", "set it to 1."))
        return problems
    if sp_size > 1 and not bool(config.use_remove_padding):
        problems.append(
            ConfigProblem(
                "ulysses_sequence_parallel_size",
                f"{sp_size} given, but ulysses_sequence_parallel_size>1 needs use_remove_padding=True "
                "(Ulysses slices the packed, padding-free sequence).",
                "set use_remove_padding=True, or ulysses_sequence_parallel_size=1.",
            )
        )
    if world_size is not None and world_size % sp_size:
        problems.append(
            ConfigProblem(
                "ulysses_sequence_parallel_size",
                f"{sp_size} does not divide the world size {world_size}.",
                "use a divisor of nnodes × n_gpus_per_node (torchrun's --nproc_per_node × nodes).",
            )
        )
    return problems


def _micro_batch_size(config: DictConfig, dp_size: int, problems: list[ConfigProblem]) -> int:
    """``data.micro_batch_size_per_gpu``; the deprecated global ``data.micro_batch_size`` is divided by dp."""
    data = config.data
    if data.get("micro_batch_size") is not None:
        if int(data.micro_batch_size) % dp_size:
            problems.append(
                ConfigProblem(
                    "data.micro_batch_size",
                    f"{data.micro_batch_size} is not divisible by the data-parallel size {dp_size}.",
                    "use data.micro_batch_size_per_gpu instead.",
                )
            )
        return max(1, int(data.micro_batch_size) // dp_size)
    return int(data.micro_batch_size_per_gpu)


def plan_batches(config: DictConfig, world_size: int) -> SFTBatchPlan:
    """Check ``data.train_batch_size`` against dp = world / sp and the micro batch; return the plan."""
    problems = _sequence_parallel_problems(config, world_size)
    if problems:
        raise ConfigError(problems)
    sp_size = sequence_parallel_size(config)
    dp_size = world_size // sp_size
    global_batch = int(config.data.train_batch_size)
    micro = _micro_batch_size(config, dp_size, problems)
    if micro <= 0:
        problems.append(ConfigProblem("data.micro_batch_size_per_gpu", f"{micro} must be > 0.", "set it to >= 1."))
    per_rank = global_batch // dp_size
    dp_words = f"data-parallel size {dp_size} (= world {world_size} / ulysses_sequence_parallel_size {sp_size})"
    if global_batch <= 0 or global_batch % dp_size:
        problems.append(
            ConfigProblem(
                "data.train_batch_size",
                f"{global_batch} is not a positive multiple of the {dp_words}.",
                f"use a multiple of {dp_size}.",
            )
        )
    elif micro > 0 and per_rank % micro:
        problems.append(
            ConfigProblem(
                "data.micro_batch_size_per_gpu",
                f"{micro} does not divide the per-rank batch {per_rank} "
                f"(= data.train_batch_size {global_batch} / {dp_words}).",
                "pick a divisor of the per-rank batch.",
            )
        )
    if problems:
        raise ConfigError(problems)
    return SFTBatchPlan(world_size, global_batch, per_rank, micro, per_rank // micro, sp_size)


def _choice_problems(config: DictConfig) -> list[ConfigProblem]:
    checks = (
        ("optim.lr_scheduler", config.optim.lr_scheduler, SCHEDULERS, "wsd is not implemented yet"),
        ("model.strategy", config.model.strategy, STRATEGIES, "FSDP2 is the default"),
        ("trainer.device", config.trainer.device, DEVICES, "cpu runs FSDP2 over gloo"),
        ("trainer.resume_mode", config.trainer.resume_mode, RESUME_MODES, "auto resumes from the latest checkpoint"),
    )
    return [
        ConfigProblem(key, f"{value!r} is not supported.", f"use one of {list(allowed)} ({why}).")
        for key, value, allowed, why in checks
        if value not in allowed
    ]


def _launch_world_size() -> int | None:
    """torchrun's ``WORLD_SIZE`` (None outside a launch: the SP divisibility is then checked by plan_batches)."""
    value = os.environ.get("WORLD_SIZE")
    return int(value) if value else None


def validate_sft_config(config: DictConfig, world_size: int | None = None) -> None:
    """Raise one ConfigError listing every problem (unsupported features, bad choices, missing paths).

    ``world_size`` defaults to torchrun's ``WORLD_SIZE``; it is needed only to check that
    ``ulysses_sequence_parallel_size`` divides it.
    """
    problems = [p for p in check_unsupported(config, "sft_trainer") if p.key not in _IMPLEMENTED_NOW]
    problems += _choice_problems(config)
    problems += _sequence_parallel_problems(config, world_size if world_size is not None else _launch_world_size())
    if config.trainer.resume_mode == "resume_path" and not config.trainer.get("resume_from_path"):
        problems.append(
            ConfigProblem(
                "trainer.resume_from_path",
                "is null but trainer.resume_mode=resume_path.",
                "set it to a global_step_N folder, or use trainer.resume_mode=auto.",
            )
        )
    if int(config.trainer.total_epochs) <= 0 and not config.trainer.get("total_training_steps"):
        problems.append(
            ConfigProblem(
                "trainer.total_epochs",
                f"{config.trainer.total_epochs} leaves nothing to train.",
                "set it to >= 1 or set trainer.total_training_steps.",
            )
        )
    if problems:
        raise ConfigError(problems)


def scheduler_config(optim: Any, total_training_steps: int) -> dict[str, Any]:
    """Translate SFT's ``optim`` keys to the engine's (PPO-style) names for ``build_lr_scheduler``.

    ``warmup_steps_ratio`` → ``lr_warmup_steps_ratio``; ``lr_scheduler`` → ``warmup_style``.
    """
    return {
        "lr": float(optim.lr),
        "betas": list(optim.betas),
        "weight_decay": float(optim.weight_decay),
        "lr_warmup_steps": -1,
        "lr_warmup_steps_ratio": float(optim.warmup_steps_ratio),
        "warmup_style": str(optim.lr_scheduler),
        "min_lr_ratio": 0.0,
        "num_cycles": 0.5,
        "total_training_steps": int(total_training_steps),
    }
