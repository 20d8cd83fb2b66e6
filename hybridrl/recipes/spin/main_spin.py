"""SPIN entry point: ``python -m hybridrl.recipes.spin.main_spin key=value ...`` (verl's ``recipe.spin.main_spin``).

Composes ``config/spin_trainer.yaml`` (the online-DPO recipe + ``data.response_key``, ``rollout.n=1``), validates
it like the online-DPO recipe (one response per prompt suffices), then
``run_ppo(config, task_runner_class=SPINTaskRunner)``.
"""

from __future__ import annotations

from omegaconf import DictConfig

from hybridrl.config import hydra_entry
from hybridrl.recipes.online_dpo.main_online_dpo import check_dpo_config
from hybridrl.trainer.main_ppo import run_ppo

__all__ = ["main"]


def run_spin(config: DictConfig) -> dict:
    from hybridrl.recipes.spin.spin_trainer import SPINTaskRunner

    return run_ppo(config, task_runner_class=SPINTaskRunner)


def check_spin_config(config: DictConfig) -> None:
    """The online-DPO checks; one generated response per prompt suffices (SPIN pairs it with the dataset's response)."""
    check_dpo_config(config, min_responses=1)


main = hydra_entry("spin_trainer", run_spin, check=check_spin_config, config_path="config")


if __name__ == "__main__":
    main()
