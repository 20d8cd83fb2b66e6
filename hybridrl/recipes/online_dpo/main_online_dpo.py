"""Online DPO entry point: ``python -m hybridrl.recipes.online_dpo.main_online_dpo key=value ...``.

Composes ``config/online_dpo_trainer.yaml`` (``ppo_trainer`` + ``algorithm.dpo.*``), validates it like
``main_ppo`` (with a reference policy, without a critic) plus the DPO keys, then
``run_ppo(config, task_runner_class=OnlineDPOTaskRunner)``. Unknown keys are reported by Hydra (struct mode).
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

__all__ = ["check_dpo_config", "dpo_problems", "main"]


def dpo_problems(config: DictConfig, min_responses: int) -> list[ConfigProblem]:
    """``algorithm.dpo.*``, ``rollout.n`` and the PPO-only switches DPO cannot honour."""
    from hybridrl.algos.dpo_losses import DPO_LOSS_REGISTRY

    problems: list[ConfigProblem] = []
    dpo = config.algorithm.dpo

    def add(key: str, message: str, fix: str) -> None:
        problems.append(ConfigProblem(key, message, fix))

    if not isinstance(dpo.beta, (int, float)) or dpo.beta <= 0:
        add("algorithm.dpo.beta", f"must be a number > 0, got {dpo.beta!r}.", "set algorithm.dpo.beta=0.1.")
    if dpo.loss_type not in DPO_LOSS_REGISTRY:
        add(
            "algorithm.dpo.loss_type",
            f"unknown DPO loss {dpo.loss_type!r}.",
            f"set it to one of {', '.join(sorted(DPO_LOSS_REGISTRY))}.",
        )
    if not isinstance(dpo.label_smoothing, (int, float)) or not 0 <= dpo.label_smoothing < 0.5:
        add(
            "algorithm.dpo.label_smoothing",
            f"must be in [0, 0.5), got {dpo.label_smoothing!r}.",
            "set algorithm.dpo.label_smoothing=0.0 (plain DPO) or e.g. 0.1 (cDPO).",
        )
    n = config.actor_rollout_ref.rollout.n
    if n < min_responses:
        add(
            "actor_rollout_ref.rollout.n",
            f"this recipe needs >= {min_responses} responses per prompt, got {n}.",
            f"set actor_rollout_ref.rollout.n={max(min_responses, 2)}.",
        )
    if config.algorithm.use_kl_in_reward:
        add(
            "algorithm.use_kl_in_reward",
            "DPO has no reward-based advantage to penalise.",
            "set algorithm.use_kl_in_reward=False (beta ties the policy to the reference).",
        )
    lora_rank = config.actor_rollout_ref.model.lora_rank
    if lora_rank > 0 and (config.trainer.get("ref_update_freq", -1) or -1) > 0:
        add(
            "trainer.ref_update_freq",
            "with LoRA the reference is the base model (adapters off); it cannot be refreshed from the actor.",
            "set trainer.ref_update_freq=-1, or train without LoRA (model.lora_rank=0).",
        )
    if config.critic.get("enable"):
        add("critic.enable", "DPO trains no critic.", "set critic.enable=False.")
    return problems


def check_dpo_config(config: DictConfig, min_responses: int = 2) -> None:
    """Raise ConfigError with every problem (``main_ppo``'s and the DPO ones); print the batch plan."""
    problems = collect_problems(config, use_reference_policy=True, use_critic=False)
    problems += dpo_problems(config, min_responses)
    if problems:
        raise ConfigError(problems)
    print(format_batch_plan(compute_batch_plan(config)), flush=True)


def run_online_dpo(config: DictConfig) -> dict:
    from hybridrl.recipes.online_dpo.dpo_trainer import OnlineDPOTaskRunner

    return run_ppo(config, task_runner_class=OnlineDPOTaskRunner)


main = hydra_entry("online_dpo_trainer", run_online_dpo, check=check_dpo_config, config_path="config")


if __name__ == "__main__":
    main()
