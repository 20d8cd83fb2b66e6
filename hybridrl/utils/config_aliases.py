"""verl 0.9's new homes of settings hybridrl reads under their verl 0.5 names, resolved once per tree.

verl 0.9 moved several settings (``reward_model.reward_manager`` -> ``reward.reward_manager.name``,
``actor.ulysses_sequence_parallel_size`` -> ``actor.fsdp_config.ulysses_sequence_parallel_size``, ...) and kept
the old key as a deprecated override: the old key wins when it is set, else the new key holds the value. hybridrl's
code reads the old keys; :func:`resolve_aliases` writes the value verl 0.9 would use into each old key, so a
command line in either spelling means what it means in verl 0.9.

    old key set (not null; for a parallel size: > 1)   -> kept
    otherwise                                          -> the new key's value

It runs wherever a config enters the program: ``compose_config`` (the CLI's and the tests' composition),
``with_defaults`` (the CLI, ``RayPPOTrainer``, the SFT trainer) and ``section_with_defaults`` (a worker, dataset
or engine section built by user code). A resolved tree resolves to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf, open_dict

__all__ = ["ALIASES", "Alias", "resolve_aliases"]


@dataclass(frozen=True)
class Alias:
    """verl 0.9's key ``new``, read by hybridrl as ``old``; ``unset`` is the old key's "not set" value."""

    new: str
    old: str
    unset: object = None


_ACTOR, _REF = "actor_rollout_ref.actor", "actor_rollout_ref.ref"

ALIASES: tuple[Alias, ...] = (
    Alias("reward.reward_manager.name", "reward_model.reward_manager"),
    Alias("reward.custom_reward_function.path", "custom_reward_function.path"),
    Alias("reward.custom_reward_function.name", "custom_reward_function.name"),
    Alias("reward.reward_model.enable", "reward_model.enable"),
    Alias("reward.reward_model.enable_resource_pool", "reward_model.enable_resource_pool"),
    Alias("reward.reward_model.n_gpus_per_node", "reward_model.n_gpus_per_node"),
    Alias("reward.reward_model.nnodes", "reward_model.nnodes"),
    Alias("reward.reward_model.model_path", "reward_model.model.path"),
    # a sequence-parallel size of 1 is "not set": verl 0.9 copies the old key only when it is > 1
    Alias(f"{_ACTOR}.fsdp_config.ulysses_sequence_parallel_size", f"{_ACTOR}.ulysses_sequence_parallel_size", unset=1),
    Alias(f"{_REF}.fsdp_config.ulysses_sequence_parallel_size", f"{_REF}.ulysses_sequence_parallel_size", unset=1),
    Alias("critic.fsdp.ulysses_sequence_parallel_size", "critic.ulysses_sequence_parallel_size", unset=1),
    Alias(f"{_ACTOR}.optim.lr_scheduler_type", f"{_ACTOR}.optim.warmup_style"),
    Alias("critic.optim.lr_scheduler_type", "critic.optim.warmup_style"),
    Alias("ray_kwargs.ray_init.num_cpus", "ray_init.num_cpus"),
    Alias("ray_kwargs.timeline_json_file", "ray_init.timeline_json_file"),
)


def resolve_aliases(config: DictConfig) -> DictConfig:
    """Write into each old key of :data:`ALIASES` the value verl 0.9 uses (in place; returns ``config``).

    A tree lacking either key of a pair (a recipe's, a verl 0.5 one) keeps that pair as it is.
    """
    for alias in ALIASES:
        if OmegaConf.select(config, alias.new, default=_MISSING) is _MISSING:
            continue
        old = OmegaConf.select(config, alias.old, default=_MISSING)
        if old is _MISSING or old != alias.unset:
            continue
        new = OmegaConf.select(config, alias.new)
        with open_dict(config):
            OmegaConf.update(config, alias.old, new, merge=False)
    return config


_MISSING = object()
