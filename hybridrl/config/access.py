"""Small readers over a DictConfig used by the checks and the batch plan (no defaults restated)."""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config.errors import ConfigProblem

ACTOR = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"


def get(config: DictConfig, key: str) -> Any:
    """The resolved value at dotted ``key``; None when the key is absent (e.g. a verl config)."""
    return OmegaConf.select(config, key, default=None)


def positive_int(config: DictConfig, key: str, problems: list[ConfigProblem], allow_none: bool = False) -> int | None:
    """The value at ``key`` if it is an int >= 1; otherwise record a problem and return None."""
    value = get(config, key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(ConfigProblem(key, f"must be a positive integer, got {value!r}.", f"set {key}=<int >= 1>."))
        return None
    return value


def world_size(config: DictConfig) -> int | None:
    """trainer.nnodes * trainer.n_gpus_per_node, or None when either is not a positive int."""
    return _pool_size(config, "trainer")


def role_world_size(config: DictConfig, section: str) -> int | None:
    """Ranks of ``section``'s worker group: its own pool (``<section>.enable_resource_pool``:
    ``nnodes * n_gpus_per_node`` of the section) or the global pool."""
    if not get(config, f"{section}.enable_resource_pool"):
        return world_size(config)
    return _pool_size(config, section)


def _pool_size(config: DictConfig, section: str) -> int | None:
    """``<section>.nnodes * <section>.n_gpus_per_node``, or None when either is not a positive int."""
    nodes, per_node = get(config, f"{section}.nnodes"), get(config, f"{section}.n_gpus_per_node")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (nodes, per_node)):
        return None
    return int(nodes) * int(per_node)


# megatron.* sizes whose product is the ranks holding one model replica (the rest of a role's ranks are data parallel)
MEGATRON_REPLICA_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


def uses_megatron(config: DictConfig, section: str) -> bool:
    """Whether ``<section>.strategy`` (actor, critic or reward_model section) is ``megatron``."""
    return get(config, f"{section}.strategy") == "megatron"


def replica_size(config: DictConfig, section: str) -> int:
    """Ranks holding one replica of ``section``'s model: TP × PP × CP of ``<section>.megatron`` with strategy=megatron
    (verl's Megatron workers), else ``<section>.ulysses_sequence_parallel_size``. Data-parallel size = ranks / this.
    Unset or non-positive values count as 1 (the config checks report them)."""
    if uses_megatron(config, section):
        keys = [f"{section}.megatron.{key}" for key in MEGATRON_REPLICA_KEYS]
    else:
        keys = [f"{section}.ulysses_sequence_parallel_size"]
    size = 1
    for key in keys:
        value = get(config, key)
        size *= value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
    return size


def need_critic(config: DictConfig) -> bool:
    """A critic is used when critic.enable is True, or when it is null/absent and the estimator is gae
    (verl's rule, with verl's warning when the estimator turns the critic off)."""
    enable = get(config, "critic.enable")
    if enable is not None:
        return bool(enable)
    estimator = get(config, "algorithm.adv_estimator")
    if getattr(estimator, "value", estimator) == "gae":
        return True
    warnings.warn(  # attributed to this line, so Python's default filter shows it once per process
        "Disabled critic as algorithm.adv_estimator != gae. If it is not intended, please set critic.enable=True",
        stacklevel=1,
    )
    return False


def need_reference_policy(config: DictConfig) -> bool:
    """The reference policy is created when a KL term uses it (in the reward or in the actor loss)."""
    return bool(get(config, "algorithm.use_kl_in_reward")) or bool(get(config, f"{ACTOR}.use_kl_loss"))


def next_multiple(value: int, step: int) -> int:
    """Smallest multiple of ``step`` that is >= ``value`` (and >= step)."""
    return max(step, -(-value // step) * step)
