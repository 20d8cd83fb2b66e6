"""DAPO entry point: ``python -m hybridrl.recipes.dapo.main_dapo key=value ...`` (verl's ``recipe.dapo.main_dapo``).

Composes ``config/dapo_trainer.yaml`` (``ppo_trainer`` + DAPO's settings), validates it like ``main_ppo``
plus the dynamic-sampling keys, then ``run_ppo(config, task_runner_class=DAPOTaskRunner)``.
"""

from __future__ import annotations

import warnings

from omegaconf import DictConfig

from hybridrl.config import (
    ConfigError,
    ConfigProblem,
    collect_problems,
    compute_batch_plan,
    format_batch_plan,
    hydra_entry,
)
from hybridrl.trainer.main_ppo import run_ppo

# The YAML finds ppo_trainer through ``pkg://hybridrl.configs``, a namespace package Hydra calls "not available"
# even though it loads from it.
warnings.filterwarnings("ignore", message=r"provider=hydra\.searchpath.*hybridrl\.configs is not available")

FILTER_METRICS = ("acc", "score", "seq_reward", "seq_final_reward")


def dapo_problems(config: DictConfig) -> list[ConfigProblem]:
    """Dynamic-sampling checks on top of ``main_ppo``'s."""
    problems: list[ConfigProblem] = []
    filter_groups = config.algorithm.filter_groups
    if filter_groups.enable and not filter_groups.metric:
        problems.append(
            ConfigProblem(
                "algorithm.filter_groups.metric",
                "dynamic sampling needs the metric whose group variance decides.",
                f"set algorithm.filter_groups.metric to one of {', '.join(FILTER_METRICS)} (or another reward extra).",
            )
        )
    max_batches = filter_groups.max_num_gen_batches
    if not isinstance(max_batches, int) or max_batches < 0:
        problems.append(
            ConfigProblem(
                "algorithm.filter_groups.max_num_gen_batches",
                f"must be an int >= 0, got {max_batches!r}.",
                "set it to 0 (no limit) or a positive number of generation batches per step.",
            )
        )
    gen_bsz = config.data.gen_batch_size
    if gen_bsz is not None and (not isinstance(gen_bsz, int) or gen_bsz < 1):
        problems.append(
            ConfigProblem(
                "data.gen_batch_size",
                f"must be a positive int, got {gen_bsz!r}.",
                "set data.gen_batch_size to a multiple of data.train_batch_size, e.g. 3x.",
            )
        )
    return problems


def check_dapo_config(config: DictConfig) -> None:
    """Raise ConfigError with every problem (``main_ppo``'s and DAPO's); print the batch plan."""
    problems = collect_problems(config) + dapo_problems(config)
    if problems:
        raise ConfigError(problems)
    print(format_batch_plan(compute_batch_plan(config)), flush=True)


def run_dapo(config: DictConfig) -> dict:
    from hybridrl.recipes.dapo.dapo_ray_trainer import DAPOTaskRunner

    return run_ppo(config, task_runner_class=DAPOTaskRunner)


# the recipe YAML only changes values, so ppo_trainer's key set validates the overrides
main = hydra_entry("dapo_trainer", run_dapo, check=check_dapo_config, config_path="config", override_keys="ppo_trainer")


if __name__ == "__main__":
    main()
