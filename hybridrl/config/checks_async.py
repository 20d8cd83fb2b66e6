"""Checks of the async trainer modes (``trainer.v1``, verl 0.9) and the rollout's own pool; torch-free.

Each problem names its dotted key and the fix. Nothing is checked in ``sync`` mode beyond the allowed values.
"""

from __future__ import annotations

from omegaconf import DictConfig

from hybridrl.config.access import ROLLOUT, get, positive_int
from hybridrl.config.errors import ConfigProblem

V1 = "trainer.v1"
MODES = ("sync", "colocate_async", "separate_async")
STRATEGIES = ("drop", "wait")


def check_async_modes(config: DictConfig) -> list[ConfigProblem]:
    """Problems of ``trainer.v1.*`` and ``actor_rollout_ref.rollout.nnodes / n_gpus_per_node``."""
    if get(config, V1) is None:
        return []
    mode = get(config, f"{V1}.trainer_mode")
    if mode not in MODES:
        return [ConfigProblem(f"{V1}.trainer_mode", f"is {mode!r}.", f"use one of {', '.join(MODES)}.")]
    problems = _check_sampler(config)
    if mode == "sync":
        return problems
    depth_key = f"{V1}.{mode}.num_warmup_batches"
    problems += _at_least_one(config, depth_key)
    problems += _refused_with_async(config, mode)
    if mode == "separate_async":
        problems += _check_separate(config)
    if problems:
        return problems
    if get(config, f"{V1}.sampler.max_off_policy_strategy") == "drop":
        problems += _check_depth_under_threshold(config, depth_key)
    return problems


def _check_sampler(config: DictConfig) -> list[ConfigProblem]:
    sampler = f"{V1}.sampler"
    problems = _at_least_one(config, f"{sampler}.max_off_policy_threshold")
    strategy = get(config, f"{sampler}.max_off_policy_strategy")
    if strategy not in STRATEGIES:
        problems.append(ConfigProblem(f"{sampler}.max_off_policy_strategy", f"is {strategy!r}.",
                                      f"use one of {', '.join(STRATEGIES)}."))
    if get(config, f"{sampler}.sync_refill_failed_groups"):
        problems.append(ConfigProblem(f"{sampler}.sync_refill_failed_groups", "is not supported (hybridrl's "
                                      "rollouts have no failed groups to refill).", "set it to False."))
    for leaf in ("path", "name"):
        if get(config, f"{sampler}.custom_sampler.{leaf}") is not None:
            problems.append(ConfigProblem(f"{sampler}.custom_sampler.{leaf}", "custom replay-buffer samplers are "
                                          "not supported.", "set it to null (data.sampler picks prompts)."))
    return problems


def _refused_with_async(config: DictConfig, mode: str) -> list[ConfigProblem]:
    """Settings the async modes cannot honour."""
    problems = []
    if get(config, "algorithm.adv_estimator") == "remax":
        problems.append(ConfigProblem("algorithm.adv_estimator", f"remax's greedy baseline is generated with the "
                                      f"trainer's weights at each step; {V1}.trainer_mode={mode} generates ahead.",
                                      f"use {V1}.trainer_mode=sync with remax."))
    if get(config, "trainer.rollout_probs_diff_max_bound") is not None:
        problems.append(ConfigProblem("trainer.rollout_probs_diff_max_bound", f"checks an on-policy weight sync; with "
                                      f"{V1}.trainer_mode={mode} batches come from older weights by design, so the "
                                      "rollout and training probabilities differ.",
                                      "set it to null (training/rollout_probs_diff_* are still logged)."))
    return problems


def _check_separate(config: DictConfig) -> list[ConfigProblem]:
    """The rollout's own pool, the push period and the threshold it needs."""
    problems = [
        ConfigProblem(key, f"is {get(config, key)!r}: separate_async runs the rollout on a pool of its own "
                      f"({ROLLOUT}.nnodes x {ROLLOUT}.n_gpus_per_node devices; on CPU, processes).",
                      f"set {key} >= 1 (e.g. {ROLLOUT}.nnodes=1 {ROLLOUT}.n_gpus_per_node=1).")
        for key in (f"{ROLLOUT}.nnodes", f"{ROLLOUT}.n_gpus_per_node") if _at_least_one(config, key)
    ]
    sync_key = f"{V1}.separate_async.parameter_sync_step"
    problems += _at_least_one(config, sync_key)
    if problems:
        return problems
    sync_step, threshold = int(get(config, sync_key)), int(get(config, f"{V1}.sampler.max_off_policy_threshold"))
    if threshold < sync_step - 1:
        problems.append(ConfigProblem(
            f"{V1}.sampler.max_off_policy_threshold",
            f"is {threshold}, but with {sync_key}={sync_step} the rollout's weights lag the actor's by up to "
            f"{sync_step - 1} versions, so even a batch generated just in time could never be trained.",
            f"raise it to at least {sync_step - 1}, or lower {sync_key}."))
    return problems


def _check_depth_under_threshold(config: DictConfig, depth_key: str) -> list[ConfigProblem]:
    """``drop`` with more batches ahead than the threshold drops every batch once the pipeline is full."""
    depth, threshold = int(get(config, depth_key)), int(get(config, f"{V1}.sampler.max_off_policy_threshold"))
    if depth <= threshold:
        return []
    return [ConfigProblem(depth_key, f"is {depth}: every batch would be {depth} versions stale, over "
                          f"{V1}.sampler.max_off_policy_threshold={threshold}, and be dropped.",
                          f"lower it to at most {threshold}, or use {V1}.sampler.max_off_policy_strategy=wait.")]


def _at_least_one(config: DictConfig, key: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    positive_int(config, key, problems)
    return problems
