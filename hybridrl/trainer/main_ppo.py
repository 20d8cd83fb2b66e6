"""PPO/GRPO entry point: ``python -m hybridrl.trainer.main_ppo key=value ...`` (verl's command line).

    command line ──► override keys checked (unknown key -> closest valid key)
                 ──► Hydra composes configs/ppo_trainer.yaml (or --config-name ppo_megatron_trainer,
                     completed with ppo_trainer.yaml's keys it lacks) (+ overrides)
                 ──► validate_config (every problem at once) ──► batch plan printed
                 ──► run_ppo(config): preflight (files: checkpoint folder, tracker, datasets) ──► Ray

``--cfg job`` prints the composed tree and stops (Hydra's flag); nothing heavy is imported before
``run_ppo``. verl's ``create_rl_dataset``, ``create_rl_sampler`` (the ``data.sampler.*`` hook) and
``TaskRunner`` are importable from here. The command line itself is ``hybridrl.config.hydra_entry``,
shared by every entry point.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config import (
    BatchPlan,
    compute_batch_plan,
    format_batch_plan,
    hydra_entry,
    validate_config,
    with_defaults,
)
from hybridrl.config.access import ACTOR, get

# Ray forwards actor stdout asynchronously; without a short pause the last lines are lost at shutdown.
_LOG_FLUSH_SECONDS = 1.0


def complete_config(config: DictConfig) -> DictConfig:
    """``config`` with the keys of ``ppo_trainer.yaml`` it lacks: ``--config-name ppo_megatron_trainer`` (verl's
    Megatron file) has no FSDP-only keys and none of hybridrl's additions, which the trainer reads by attribute.

    The Megatron tree is returned resolved: its ``ref.megatron`` / ``critic.megatron`` sections interpolate whole
    dicts (``override_transformer_config: ${oc.select:...,{}}``), which ``OmegaConf.resolve`` cannot write in place
    (the TaskRunner resolves the tree, as verl's does)."""
    if get(config, f"{ACTOR}.megatron") is None:
        return config
    resolved = OmegaConf.create(OmegaConf.to_container(with_defaults(config, "ppo_trainer"), resolve=True))
    OmegaConf.set_struct(resolved, True)
    return resolved


def check_config(config: DictConfig) -> BatchPlan:
    """Validate ``config`` (raises ConfigError listing every problem), then print and return its batch plan."""
    config = complete_config(config)
    validate_config(config)
    plan = compute_batch_plan(config)
    print(format_batch_plan(plan), flush=True)
    return plan


def run_ppo(config: DictConfig, task_runner_class: type | None = None) -> dict:
    """Check the files (preflight), start (or join) Ray, run the TaskRunner actor (the single controller) and train.

    The preflight (checkpoint folder writable, resume tracker, datasets non-empty, prompt lengths) raises a
    ConfigError before Ray starts. Ray is shut down at the end if this call started it; recipes pass their own
    ``task_runner_class`` (a TaskRunner subclass building their trainer).
    """
    from hybridrl.config.preflight import run_preflight

    config = complete_config(config)
    run_preflight(config)

    import ray  # after the preflight: a bad config fails in seconds, before Ray is imported

    from hybridrl.trainer.ppo.task_runner import PPO_RAY_ENV_VARS, TaskRunner
    from hybridrl.utils.ray_utils import init_ray

    env_vars = {**PPO_RAY_ENV_VARS, "HYBRIDRL_DEVICE": config.trainer.device}
    started_here = not ray.is_initialized()
    if started_here:
        init_ray(config.get("ray_init", {}), config.trainer.device, env_vars=env_vars)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)  # after ray.init, which installs its own handler
    runner_cls = ray.remote(num_cpus=1)(task_runner_class or TaskRunner)
    try:
        runner = runner_cls.options(runtime_env={"env_vars": env_vars}).remote()
        final_metrics = ray.get(runner.run.remote(config))
        time.sleep(_LOG_FLUSH_SECONDS)  # let Ray forward the workers' last log lines before shutdown
        print(f"[main_ppo] finished; final validation metrics: {final_metrics}", flush=True)
        return final_metrics
    except KeyboardInterrupt:
        print("[main_ppo] interrupted: stopping workers. Checkpoints are written atomically, so the last "
              "complete one is safe to resume from (trainer.resume_mode=auto).", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        if started_here:
            ray.shutdown()


def _raise_keyboard_interrupt(signum, frame):  # SIGTERM → the same clean path as Ctrl-C
    raise KeyboardInterrupt(f"signal {signum}")


# main(config=None): the command line, or check + run an already composed config
main = hydra_entry("ppo_trainer", run_ppo, check=check_config, override_keys="ppo_trainer")


# verl 0.5 users import these from main_ppo; they are loaded on first access so that the command line
# starts without importing torch or Ray.
_LAZY_EXPORTS = {
    "create_rl_dataset": "hybridrl.utils.dataset.rl_dataset",
    "create_rl_sampler": "hybridrl.utils.dataset.rl_dataset",
    "TaskRunner": "hybridrl.trainer.ppo.task_runner",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
