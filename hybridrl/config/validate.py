"""``validate_config``: every problem of a PPO config at once, before Ray starts (verl's name).

Each problem names its dotted key and a fix; all are raised together as one ConfigError.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config.access import ACTOR, get, need_critic, need_reference_policy
from hybridrl.config.checks_algorithm import check_algorithm
from hybridrl.config.checks_async import check_async_modes
from hybridrl.config.checks_batch import check_batch_sizes
from hybridrl.config.checks_distillation import check_distillation
from hybridrl.config.checks_env import check_environment
from hybridrl.config.checks_megatron import check_megatron, check_megatron_environment
from hybridrl.config.checks_moe import check_moe
from hybridrl.config.checks_optim import check_optimizers
from hybridrl.config.checks_rollout import check_rollout_mode
from hybridrl.config.checks_rollout_correction import check_rollout_correction
from hybridrl.config.checks_types import check_value_types
from hybridrl.config.errors import ConfigError, ConfigProblem
from hybridrl.config.unsupported import check_unsupported
from hybridrl.utils.config_defaults import with_defaults


def validate_config(
    config: DictConfig | dict[str, Any],
    use_reference_policy: bool | None = None,
    use_critic: bool | None = None,
    *,
    check_env: bool = True,
) -> None:
    """Check a composed ``ppo_trainer`` config; raise ConfigError listing every problem.

    Args:
        config: the composed tree (``main_ppo``'s Hydra config).
        use_reference_policy: whether the run creates a reference policy; None = derived as in verl
            (a KL term in the reward or in the actor loss).
        use_critic: whether the run uses a critic; None = ``critic.enable``, or adv_estimator == gae.
        check_env: also check the machine (rollout engine installed, device, files exist).

    Settings that are accepted but ignored (speed-only features we lack, deprecated keys) are
    reported once as :class:`~hybridrl.config.errors.ConfigWarning`.
    """
    problems = collect_problems(config, use_reference_policy, use_critic, check_env=check_env)
    if problems:
        raise ConfigError(problems)


def collect_problems(
    config: DictConfig | dict[str, Any],
    use_reference_policy: bool | None = None,
    use_critic: bool | None = None,
    *,
    check_env: bool = True,
) -> list[ConfigProblem]:
    """The problems :func:`validate_config` would raise, without raising (for plan printers and tests)."""
    if not isinstance(config, DictConfig):
        config = OmegaConf.create(config)
    if get(config, f"{ACTOR}.megatron") is not None:  # ppo_megatron_trainer.yaml: the keys it lacks as main_ppo fills them
        config = with_defaults(config, "ppo_trainer")
    if use_reference_policy is None:
        use_reference_policy = need_reference_policy(config)
    if use_critic is None:
        use_critic = need_critic(config)
    problems = check_value_types(config)  # first: a value of the wrong type names the key before others trip on it
    problems += check_batch_sizes(config, use_reference_policy, use_critic)
    problems += check_algorithm(config, use_reference_policy, use_critic)
    problems += check_rollout_mode(config)
    problems += check_rollout_correction(config)
    problems += check_moe(config)
    problems += check_async_modes(config)
    problems += check_optimizers(config, use_critic)
    problems += check_megatron(config, use_critic, use_reference_policy)
    problems += check_distillation(config)
    problems += check_unsupported(config, "ppo_trainer")
    if check_env:
        problems += check_environment(config, use_critic)
        problems += check_megatron_environment(config, use_critic, use_reference_policy)
    return _dedupe(problems)


def _dedupe(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    seen: set[ConfigProblem] = set()
    return [p for p in problems if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]
