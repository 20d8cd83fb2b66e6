"""The batch plan of a worker built by user code with only its config section (verl's ``Worker(config, role)``).

The driver computes the plan once (``compute_batch_plan``) and hands each worker its frozen part. A worker
constructed without one computes the same plan here: its section placed in the shipped tree, its own worker
group as the whole world (verl's workers normalise their section with their group's size the same way), and
the batch checks of the sections it uses raise :class:`~hybridrl.config.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import OmegaConf

from hybridrl.config.batch_plan import BatchPlan, ForwardPlan, RolePlan, compute_batch_plan
from hybridrl.config.checks_batch import check_batch_sizes
from hybridrl.config.errors import ConfigError
from hybridrl.utils.config_defaults import tree_with_section

__all__ = ["standalone_batch_plan", "update_split"]


def standalone_batch_plan(section: Any, path: str, world_size: int, checked: Sequence[str]) -> BatchPlan:
    """The plan of one worker group of ``world_size`` ranks holding ``section`` (at dotted ``path``).

    Args:
        section: the worker's config section (``actor_rollout_ref``, ``critic`` or ``reward_model``).
        path: its place in ``ppo_trainer.yaml``.
        world_size: ranks of the worker group.
        checked: dotted key prefixes whose batch problems are raised (the sections this worker uses).

    Raises:
        ConfigError: the batch settings of ``checked`` do not fit ``world_size`` ranks.
    """
    tree = tree_with_section(section, path)
    OmegaConf.update(tree, "trainer.nnodes", 1)
    OmegaConf.update(tree, "trainer.n_gpus_per_node", world_size)
    for own_pool in ("critic", "reward_model"):  # the worker's group is its pool
        OmegaConf.update(tree, f"{own_pool}.enable_resource_pool", False)
    if path in ("critic", "reward_model"):
        OmegaConf.update(tree, f"{path}.enable", True)
    use_ref = any(prefix.startswith("actor_rollout_ref.ref") for prefix in checked)
    problems = check_batch_sizes(tree, use_reference_policy=use_ref, use_critic=path == "critic")
    problems = [problem for problem in problems if problem.key.startswith(tuple(checked))]
    if problems:
        raise ConfigError(problems)
    return compute_batch_plan(tree)


def update_split(section: Any, update: RolePlan | None) -> tuple[int, ForwardPlan]:
    """``(mini-batch samples per rank, micro-batching)`` of a PPO update (actor or critic).

    From ``update`` (the plan the driver handed over) when given; else from ``section`` itself, which then holds
    per-rank sizes already (verl's contract for an actor/critic that user code builds directly).
    """
    if update is not None:
        return update.mini_batch_samples_per_rank, update.micro_batching
    dynamic = bool(section.use_dynamic_bsz)
    micro_batching = ForwardPlan(
        None if dynamic else section.ppo_micro_batch_size_per_gpu,
        int(section.ppo_max_token_len_per_gpu) if dynamic else None,
    )
    return int(section.ppo_mini_batch_size), micro_batching
