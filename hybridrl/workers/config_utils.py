"""Per-rank batch-size normalisation of the worker config sections, as verl 0.5's workers do it.

The user writes global sizes that count *prompts* (``ppo_mini_batch_size``) or samples
(``*_micro_batch_size``); the workers turn them into per-rank sample counts in their constructor:

    ppo_mini_batch_size      := ppo_mini_batch_size * rollout.n // (world_size // sp_size)
    ppo_micro_batch_size_per_gpu := ppo_micro_batch_size // (world_size // sp_size)   (deprecated global key)
    log_prob_micro_batch_size_per_gpu := log_prob_micro_batch_size // (world_size // sp_size)

The section is modified in place (callers pass their own copy). Errors name the dotted key and a fix.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

__all__ = [
    "normalize_actor_batch_sizes",
    "normalize_critic_batch_sizes",
    "normalize_log_prob_batch_sizes",
    "normalize_reward_model_batch_sizes",
    "resolved_copy",
]


def resolved_copy(config: Any) -> DictConfig:
    """A detached, fully resolved, writable copy of a config section (dict or DictConfig)."""
    if isinstance(config, DictConfig):
        container = OmegaConf.to_container(config, resolve=True)
    else:
        container = dict(config)
    return OmegaConf.create(container)


def _dp_divisor(world_size: int, sp_size: int, prefix: str) -> int:
    if sp_size < 1 or world_size % sp_size != 0:
        raise ValueError(
            f"{prefix}.ulysses_sequence_parallel_size={sp_size} must divide the worker world size {world_size}."
        )
    return world_size // sp_size


def _divide_global(section: DictConfig, global_key: str, per_gpu_key: str, dp: int, prefix: str) -> None:
    """Deprecated global micro size → per-GPU size (verl: ``x //= dp; x_per_gpu = x``)."""
    value = section.get(global_key)
    if value is None:
        return
    if value < dp:
        raise ValueError(
            f"{prefix}.{global_key}={value} is smaller than the data-parallel size {dp}; "
            f"raise it or set {prefix}.{per_gpu_key} instead."
        )
    with open_dict(section):
        section[global_key] = value // dp
        section[per_gpu_key] = value // dp


def normalize_actor_batch_sizes(actor: DictConfig, rollout_n: int, world_size: int, prefix: str = "actor") -> None:
    """Normalise ``actor.ppo_mini_batch_size`` and the micro batch size to per-rank sample counts.

    Raises:
        ValueError: naming the key when the normalised mini batch is 0 or not divisible by the micro batch.
    """
    dp = _dp_divisor(world_size, actor.get("ulysses_sequence_parallel_size", 1) or 1, prefix)
    mini = actor.ppo_mini_batch_size * rollout_n
    if mini // dp <= 0:
        raise ValueError(
            f"{prefix}.ppo_mini_batch_size={actor.ppo_mini_batch_size} x rollout.n={rollout_n} = {mini} samples "
            f"cannot be split over {dp} data-parallel ranks; raise {prefix}.ppo_mini_batch_size to >= {dp}."
        )
    if mini % dp != 0:
        raise ValueError(
            f"{prefix}.ppo_mini_batch_size={actor.ppo_mini_batch_size} x rollout.n={rollout_n} = {mini} samples "
            f"is not divisible by the {dp} data-parallel ranks; pick a multiple of {dp}."
        )
    with open_dict(actor):
        actor.ppo_mini_batch_size = mini // dp
    _divide_global(actor, "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", dp, prefix)
    _check_micro_divides_mini(actor, "ppo_micro_batch_size_per_gpu", prefix)


def _check_micro_divides_mini(section: DictConfig, micro_key: str, prefix: str) -> None:
    micro = section.get(micro_key)
    if micro is None:
        if not section.get("use_dynamic_bsz", False):
            raise ValueError(
                f"{prefix}.{micro_key} is not set; set it (samples per GPU per forward) or use_dynamic_bsz=True."
            )
        return
    mini = section.ppo_mini_batch_size
    if micro <= 0 or mini % micro != 0:
        raise ValueError(
            f"{prefix}.ppo_mini_batch_size (per rank after normalisation: {mini}) must be divisible by "
            f"{prefix}.{micro_key}={micro}; choose a micro batch size that divides {mini}."
        )


def normalize_log_prob_batch_sizes(section: DictConfig, world_size: int, prefix: str) -> None:
    """``rollout``/``ref``: deprecated ``log_prob_micro_batch_size`` → ``log_prob_micro_batch_size_per_gpu``."""
    dp = _dp_divisor(world_size, section.get("ulysses_sequence_parallel_size", 1) or 1, prefix)
    _divide_global(section, "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu", dp, prefix)
    if section.get("log_prob_micro_batch_size_per_gpu") is None and not section.get("log_prob_use_dynamic_bsz", False):
        raise ValueError(
            f"{prefix}.log_prob_micro_batch_size_per_gpu is not set; set it or {prefix}.log_prob_use_dynamic_bsz=True."
        )


def normalize_critic_batch_sizes(critic: DictConfig, world_size: int, prefix: str = "critic") -> None:
    """Critic: ``ppo_mini_batch_size *= rollout_n // dp``, micro and forward micro sizes per GPU."""
    rollout_n = critic.get("rollout_n", 1) or 1
    normalize_actor_batch_sizes(critic, rollout_n, world_size, prefix)
    dp = _dp_divisor(world_size, critic.get("ulysses_sequence_parallel_size", 1) or 1, prefix)
    _divide_global(critic, "forward_micro_batch_size", "forward_micro_batch_size_per_gpu", dp, prefix)
    if critic.get("forward_micro_batch_size_per_gpu") is None:
        with open_dict(critic):
            critic.forward_micro_batch_size_per_gpu = critic.get("ppo_micro_batch_size_per_gpu")


def normalize_reward_model_batch_sizes(reward_model: DictConfig, world_size: int) -> None:
    """Reward model: deprecated global ``micro_batch_size`` → ``micro_batch_size_per_gpu``."""
    dp = _dp_divisor(world_size, reward_model.get("ulysses_sequence_parallel_size", 1) or 1, "reward_model")
    _divide_global(reward_model, "micro_batch_size", "micro_batch_size_per_gpu", dp, "reward_model")
    if reward_model.get("micro_batch_size_per_gpu") is None and not reward_model.get("use_dynamic_bsz", False):
        raise ValueError(
            "reward_model.micro_batch_size_per_gpu is not set; set it or reward_model.use_dynamic_bsz=True."
        )
