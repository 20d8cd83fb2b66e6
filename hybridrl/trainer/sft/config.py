"""Validate an ``sft_trainer.yaml`` config and derive the per-rank batch plan (before any model is loaded).

All problems are collected and raised together as one :class:`~hybridrl.utils.config.ConfigError`
naming the dotted key and the fix (STYLE §11).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from hybridrl.utils.config import ConfigError, ConfigProblem, check_unsupported

SCHEDULERS = ("cosine", "constant")
STRATEGIES = ("fsdp2", "fsdp")
DEVICES = ("cpu", "cuda")
RESUME_MODES = ("auto", "disable", "resume_path")
# Rows of the shared unsupported table that the SFT trainer implements now (see the report to the lead):
# multi-turn SFT runs through MultiTurnSFTDataset.
_IMPLEMENTED_NOW = ("data.multiturn.enable",)


@dataclass(frozen=True)
class SFTBatchPlan:
    """Samples per optimizer step: ``global`` = ``per_rank`` × world size = ``micro`` × ``grad_accum`` × world."""

    world_size: int
    global_batch: int
    per_rank_batch: int
    micro_batch: int
    grad_accum: int


def _micro_batch_size(config: DictConfig, world_size: int, problems: list[ConfigProblem]) -> int:
    """``data.micro_batch_size_per_gpu``; the deprecated global ``data.micro_batch_size`` is divided by the world."""
    data = config.data
    if data.get("micro_batch_size") is not None:
        if int(data.micro_batch_size) % world_size:
            problems.append(
                ConfigProblem(
                    "data.micro_batch_size",
                    f"{data.micro_batch_size} is not divisible by the world size {world_size}.",
                    "use data.micro_batch_size_per_gpu instead.",
                )
            )
        return max(1, int(data.micro_batch_size) // world_size)
    return int(data.micro_batch_size_per_gpu)


def plan_batches(config: DictConfig, world_size: int) -> SFTBatchPlan:
    """Check ``data.train_batch_size`` against the world size and the micro batch; return the plan."""
    problems: list[ConfigProblem] = []
    global_batch = int(config.data.train_batch_size)
    micro = _micro_batch_size(config, world_size, problems)
    if micro <= 0:
        problems.append(ConfigProblem("data.micro_batch_size_per_gpu", f"{micro} must be > 0.", "set it to >= 1."))
    per_rank = global_batch // world_size
    if global_batch <= 0 or global_batch % world_size:
        problems.append(
            ConfigProblem(
                "data.train_batch_size",
                f"{global_batch} is not a positive multiple of the world size {world_size}.",
                f"use a multiple of {world_size} (nnodes × n_gpus_per_node).",
            )
        )
    elif micro > 0 and per_rank % micro:
        problems.append(
            ConfigProblem(
                "data.micro_batch_size_per_gpu",
                f"{micro} does not divide the per-rank batch {per_rank} "
                f"(= data.train_batch_size {global_batch} / world size {world_size}).",
                "pick a divisor of the per-rank batch.",
            )
        )
    if problems:
        raise ConfigError(problems)
    return SFTBatchPlan(world_size, global_batch, per_rank, micro, per_rank // micro)


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


def validate_sft_config(config: DictConfig) -> None:
    """Raise one ConfigError listing every problem (unsupported features, bad choices, missing paths)."""
    problems = [p for p in check_unsupported(config, "sft_trainer") if p.key not in _IMPLEMENTED_NOW]
    problems += _choice_problems(config)
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
