"""SPIN entry point: ``python -m hybridrl.recipes.spin.main_spin key=value ...`` (verl's ``recipe.spin.main_spin``).

Composes ``config/spin_trainer.yaml`` (the online-DPO recipe + ``data.response_key``, ``rollout.n=1``), validates
it like the online-DPO recipe (one response per prompt suffices), then
``run_ppo(config, task_runner_class=SPINTaskRunner)``.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from hybridrl.recipes.online_dpo.main_online_dpo import check_dpo_config
from hybridrl.utils.config import ConfigError

__all__ = ["main"]


def run_spin(config: DictConfig) -> dict:
    from hybridrl.recipes.spin.spin_trainer import SPINTaskRunner
    from hybridrl.trainer.main_ppo import run_ppo

    return run_ppo(config, task_runner_class=SPINTaskRunner)


@hydra.main(config_path="config", config_name="spin_trainer", version_base=None)
def main(config: DictConfig) -> None:
    try:
        check_dpo_config(config, min_responses=1)
    except ConfigError as error:
        print(error, file=sys.stderr, flush=True)
        sys.exit(1)
    run_spin(config)


if __name__ == "__main__":
    main()
