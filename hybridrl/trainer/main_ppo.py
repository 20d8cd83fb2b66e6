"""PPO/GRPO entry point: ``python -m hybridrl.trainer.main_ppo key=value ...`` (verl's command line).

    command line ──► override keys checked (unknown key -> closest valid key)
                 ──► Hydra composes configs/ppo_trainer.yaml (+ overrides)
                 ──► validate_config (every problem at once) ──► batch plan printed
                 ──► run_ppo(config)

``--cfg job`` prints the composed tree and stops (Hydra's flag); nothing heavy is imported before
``run_ppo``.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from hybridrl.utils.config import (
    BatchPlan,
    ConfigError,
    compute_batch_plan,
    config_dir,
    format_batch_plan,
    prepare_cli_argv,
    validate_config,
    with_defaults,
)


def check_config(config: DictConfig) -> BatchPlan:
    """Validate ``config`` (raises ConfigError listing every problem), then print and return its batch plan."""
    validate_config(config)
    plan = compute_batch_plan(config)
    print(format_batch_plan(plan), flush=True)
    return plan


def run_ppo(config: DictConfig, task_runner_class: type | None = None) -> dict:
    """Start (or join) Ray, run the TaskRunner actor (the single controller) and train."""
    from hybridrl.trainer.ppo.task_runner import run_ppo as _run_ppo

    return _run_ppo(config, task_runner_class=task_runner_class)


@hydra.main(config_path=str(config_dir()), config_name="ppo_trainer", version_base=None)
def _hydra_main(config: DictConfig) -> None:
    try:
        check_config(config)
    except ConfigError as error:
        print(error, file=sys.stderr, flush=True)
        sys.exit(1)
    run_ppo(config)


def main(config: DictConfig | None = None) -> None:
    """Run from the command line (``config=None``) or with an already composed config."""
    if config is not None:
        config = with_defaults(config)  # a config saved by an older version gets the keys it lacks
        check_config(config)
        run_ppo(config)
        return
    try:
        sys.argv = [sys.argv[0], *prepare_cli_argv(sys.argv[1:], "ppo_trainer")]
    except ConfigError as error:
        print(error, file=sys.stderr, flush=True)
        sys.exit(1)
    _hydra_main()


if __name__ == "__main__":
    main()
