"""Algorithm checks: estimator vs critic, KL settings vs reference policy, loss aggregation, sampling."""

from __future__ import annotations

import difflib

from omegaconf import DictConfig

from hybridrl.config.access import ACTOR, ROLLOUT, get
from hybridrl.config.errors import ConfigProblem, warn_once

# verl 0.9's names (core_algos registries own the implementations; this list only catches typos early).
ADV_ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "gdpo",
)
# Estimators that read Σπ² per token from the actor's log-prob pass.
SUM_PI_SQUARED_ESTIMATORS = ("optimal_token_baseline", "tir_optimal_token_baseline")
# hybridrl.algos.aggregation.LOSS_AGG_MODES (config may not import the torch math; a test keeps the two equal)
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
KL_CTRL_TYPES = ("fixed", "adaptive")


def check_algorithm(config: DictConfig, use_reference_policy: bool, use_critic: bool) -> list[ConfigProblem]:
    """All algorithm-level problems of a PPO config."""
    problems: list[ConfigProblem] = []
    estimator = get(config, "algorithm.adv_estimator")
    _check_choice("algorithm.adv_estimator", estimator, ADV_ESTIMATORS, problems)
    if estimator == "gae" and not use_critic:
        problems.append(
            ConfigProblem(
                "algorithm.adv_estimator",
                "gae needs a critic, but the critic is disabled (critic.enable=False).",
                "set critic.enable=True (or null), or pick a critic-free estimator, e.g. algorithm.adv_estimator=grpo.",
            )
        )
    _check_estimator_inputs(config, estimator, problems)
    _check_choice(f"{ACTOR}.loss_agg_mode", get(config, f"{ACTOR}.loss_agg_mode"), LOSS_AGG_MODES, problems)
    if use_critic:
        _check_choice("critic.loss_agg_mode", get(config, "critic.loss_agg_mode"), LOSS_AGG_MODES, problems)
    _check_kl(config, use_reference_policy, problems)
    _check_sampling(config, problems)
    _check_skip_old_log_prob(config, problems)
    _check_dual_clip(config, problems)
    _check_dro_beta(config, problems)
    return problems


def _check_estimator_inputs(config: DictConfig, estimator: object, problems: list[ConfigProblem]) -> None:
    """Inputs an estimator reads beyond the rewards: GDPO's component keys, OTB's Σπ² from the actor."""
    if estimator == "gdpo" and not get(config, "algorithm.gdpo_reward_keys"):
        problems.append(
            ConfigProblem(
                "algorithm.gdpo_reward_keys",
                "gdpo normalises each reward component on its own and needs their names (the keys of the dict your "
                "compute_score returns).",
                "set algorithm.gdpo_reward_keys='[accuracy_reward,format_reward]' (your keys).",
            )
        )
    if estimator not in SUM_PI_SQUARED_ESTIMATORS:
        return
    key = f"{ACTOR}.calculate_sum_pi_squared"
    if not get(config, key):
        problems.append(
            ConfigProblem(
                key,
                f"{estimator} weighs returns by Σπ² per token, which the actor computes only with {key}=True.",
                f"set {key}=True.",
            )
        )
    # Σπ² comes from the old-log-prob forward; these settings skip that forward
    for skip_key, skip_value in (
        (f"{ACTOR}.recompute_old_log_prob", False),
        ("algorithm.rollout_correction.bypass_mode", True),
    ):
        if get(config, skip_key) is skip_value:
            problems.append(
                ConfigProblem(
                    skip_key,
                    f"{estimator} needs Σπ² from the actor's old-log-prob forward, which {skip_key}={skip_value} skips.",
                    f"set {skip_key}={not skip_value}, or pick another algorithm.adv_estimator.",
                )
            )


def _check_dro_beta(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """``policy_loss.loss_mode=dro`` needs ``policy_loss.dro_beta > 0`` (verl raises in the loss; caught here first)."""
    key = f"{ACTOR}.policy_loss.dro_beta"
    value = get(config, key)
    if get(config, f"{ACTOR}.policy_loss.loss_mode") == "dro" and not (isinstance(value, (int, float)) and value > 0):
        problems.append(
            ConfigProblem(key, f"loss_mode=dro needs a positive dro_beta, got {value}.", f"set {key}=<β > 0>.")
        )


def _check_dual_clip(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """The dual-clip bound ``c`` caps the loss at ``−A·c`` for ``A < 0``; verl asserts ``c > 1`` in the loss."""
    key = f"{ACTOR}.clip_ratio_c"
    value = get(config, key)
    if isinstance(value, (int, float)) and not value > 1.0:
        problems.append(ConfigProblem(key, f"{value} must be > 1.0 (dual-clip PPO).", f"use verl's default {key}=3.0."))


def _check_skip_old_log_prob(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """``recompute_old_log_prob=False`` is exact only for an on-policy update, and KL-in-reward needs the old ones."""
    key = f"{ACTOR}.recompute_old_log_prob"
    if get(config, key) in (None, True):
        return
    epochs, mini = get(config, f"{ACTOR}.ppo_epochs"), get(config, f"{ACTOR}.ppo_mini_batch_size")
    train = get(config, "data.train_batch_size")
    if epochs != 1 or mini != train:
        problems.append(
            ConfigProblem(
                key,
                f"{key}=False needs an on-policy update (ppo_epochs=1 and ppo_mini_batch_size == "
                f"data.train_batch_size), got ppo_epochs={epochs}, ppo_mini_batch_size={mini}, "
                f"data.train_batch_size={train}.",
                f"set {key}=True, or {ACTOR}.ppo_epochs=1 and {ACTOR}.ppo_mini_batch_size={train}.",
            )
        )
    if get(config, "algorithm.use_kl_in_reward"):
        problems.append(
            ConfigProblem(
                key,
                f"{key}=False leaves no old log-probs for algorithm.use_kl_in_reward=True.",
                f"set {key}=True, or use the KL loss (actor_rollout_ref.actor.use_kl_loss=True) instead.",
            )
        )


def _check_kl(config: DictConfig, use_reference_policy: bool, problems: list[ConfigProblem]) -> None:
    in_reward, in_loss = bool(get(config, "algorithm.use_kl_in_reward")), bool(get(config, f"{ACTOR}.use_kl_loss"))
    for key, enabled in (("algorithm.use_kl_in_reward", in_reward), (f"{ACTOR}.use_kl_loss", in_loss)):
        if enabled and not use_reference_policy:
            problems.append(
                ConfigProblem(
                    key, "a KL term needs the reference policy, which this run does not create.", f"set {key}=False."
                )
            )
    if in_loss:
        _check_kl_estimator(f"{ACTOR}.kl_loss_type", get(config, f"{ACTOR}.kl_loss_type"), problems)
    if in_reward:
        _check_kl_estimator("algorithm.kl_penalty", get(config, "algorithm.kl_penalty"), problems)
        _check_choice("algorithm.kl_ctrl.type", get(config, "algorithm.kl_ctrl.type"), KL_CTRL_TYPES, problems)
        horizon = get(config, "algorithm.kl_ctrl.horizon")
        if get(config, "algorithm.kl_ctrl.type") == "adaptive" and not (isinstance(horizon, int) and horizon > 0):
            problems.append(
                ConfigProblem(
                    "algorithm.kl_ctrl.horizon",
                    f"the adaptive controller needs horizon > 0, got {horizon!r}.",
                    "set algorithm.kl_ctrl.horizon=10000.",
                )
            )
    if in_reward and in_loss:
        warn_once("NOTICE: both algorithm.use_kl_in_reward and actor_rollout_ref.actor.use_kl_loss are enabled.")


def _check_kl_estimator(key: str, value: object, problems: list[ConfigProblem]) -> None:
    """KL estimators, optionally with verl's straight-through '+' suffix (e.g. low_var_kl+)."""
    base = value[:-1] if isinstance(value, str) and value.endswith("+") else value
    _check_choice(key, base, KL_ESTIMATORS, problems, shown=value)


def _check_sampling(config: DictConfig, problems: list[ConfigProblem]) -> None:
    if get(config, f"{ROLLOUT}.val_kwargs.do_sample"):
        temperature = get(config, f"{ROLLOUT}.temperature")
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            problems.append(
                ConfigProblem(
                    f"{ROLLOUT}.val_kwargs.do_sample",
                    f"sampling during validation needs {ROLLOUT}.temperature > 0, got {temperature!r}.",
                    f"set {ROLLOUT}.temperature=1.0 or {ROLLOUT}.val_kwargs.do_sample=False.",
                )
            )
    if get(config, "data.val_batch_size") is not None:
        warn_once("data.val_batch_size is deprecated: validation runs the whole set as one batch; remove it.")
    gen_bsz, train_bsz = get(config, "data.gen_batch_size"), get(config, "data.train_batch_size")
    if not get(config, "algorithm.filter_groups.enable") and gen_bsz not in (None, train_bsz):
        warn_once(
            f"data.gen_batch_size={gen_bsz} differs from data.train_batch_size={train_bsz} without "
            "algorithm.filter_groups.enable: the dataloader yields gen_batch_size prompts per step."
        )


def _check_choice(
    key: str, value: object, choices: tuple[str, ...], problems: list[ConfigProblem], shown: object = None
) -> None:
    if value in choices:
        return
    shown = value if shown is None else shown
    close = difflib.get_close_matches(str(value), choices, n=1)
    hint = f"did you mean {key}={close[0]}? " if close else ""
    problems.append(
        ConfigProblem(key, f"{shown!r} is not one of {', '.join(choices)}.", f"{hint}pick one of the listed values.")
    )
