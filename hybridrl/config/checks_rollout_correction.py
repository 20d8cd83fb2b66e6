"""Rollout-correction checks (``algorithm.rollout_correction``, verl 0.9): modes, thresholds and the keys they need.

The option and threshold grammar is parsed by the math itself (``hybridrl.algos.rollout_correction``), so a
config that passes here is one the driver and the actor can run.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from hybridrl.algos.rollout_correction_config import rollout_correction_params
from hybridrl.config.access import ACTOR, ROLLOUT, get
from hybridrl.config.errors import ConfigProblem, warn_once

SECTION = "algorithm.rollout_correction"


def check_rollout_correction(config: DictConfig) -> list[ConfigProblem]:
    """Problems of ``algorithm.rollout_correction`` (each names its key and the fix); none when it is absent."""
    section = get(config, SECTION)
    if section is None:
        return []
    values = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else None
    if not isinstance(values, dict):
        return [ConfigProblem(SECTION, f"must be a section of keys, got {section!r}.",
                              "remove the override, or set its keys (rollout_is, rollout_rs, ...).")]
    problems: list[ConfigProblem] = []
    try:
        params = rollout_correction_params(values)
    except ValueError as error:
        key = _key_named_in(str(error))
        return [ConfigProblem(key, str(error), f"fix {key}: see the comments above it in ppo_trainer.yaml.")]
    needs_log_probs = params.corrects or params.bypass_mode
    if needs_log_probs and not get(config, f"{ROLLOUT}.calculate_log_probs"):
        problems.append(
            ConfigProblem(
                f"{ROLLOUT}.calculate_log_probs",
                f"{SECTION} ({_describe(values)}) needs the rollout's log-probs, which the rollout returns only "
                "with calculate_log_probs=True.",
                f"set {ROLLOUT}.calculate_log_probs=True.",
            )
        )
    if params.bypass_mode:
        _check_bypass(config, problems)
    elif params.corrects and get(config, f"{ACTOR}.recompute_old_log_prob") is False:
        problems.append(
            ConfigProblem(
                f"{ACTOR}.recompute_old_log_prob",
                f"decoupled rollout correction ({_describe(values)}) compares the rollout's log-probs with the old "
                "ones, which recompute_old_log_prob=False does not compute.",
                f"set {ACTOR}.recompute_old_log_prob=True, or {SECTION}.bypass_mode=True.",
            )
        )
    return problems


def _check_bypass(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """Bypass mode skips the old-log-prob forward and replaces the policy loss (verl)."""
    if get(config, "trainer.rollout_probs_diff_max_bound") is not None:
        problems.append(
            ConfigProblem(
                "trainer.rollout_probs_diff_max_bound",
                f"{SECTION}.bypass_mode=True skips the old-log-prob forward this bound compares the rollout with.",
                f"set trainer.rollout_probs_diff_max_bound=null, or {SECTION}.bypass_mode=False.",
            )
        )
    loss_mode = get(config, f"{ACTOR}.policy_loss.loss_mode")
    if loss_mode not in (None, "vanilla"):
        warn_once(
            f"{SECTION}.bypass_mode=True replaces {ACTOR}.policy_loss.loss_mode={loss_mode} with "
            f"{SECTION}.loss_type={get(config, f'{SECTION}.loss_type')} (as verl)."
        )


def _describe(values: dict) -> str:
    shown = ("rollout_is", "rollout_rs", "bypass_mode")
    return ", ".join(f"{key}={values.get(key)!r}" for key in shown if values.get(key) not in (None, False))


def _key_named_in(message: str) -> str:
    """The dotted key a parse error is about (the messages name rollout_is / rollout_rs / loss_type first)."""
    for leaf in ("rollout_is_threshold", "rollout_rs_threshold", "rollout_rs", "rollout_is", "loss_type"):
        if leaf in message:
            return f"{SECTION}.{leaf}"
    return SECTION
