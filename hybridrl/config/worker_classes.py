"""Which worker class runs each role, by training strategy: the table ``main_ppo``'s task runner selects from.

As in verl 0.5's ``main_ppo``: the policy worker (actor + rollout, and the reference) follows
``actor_rollout_ref.actor.strategy``, the critic ``critic.strategy``, the reward model ``reward_model.strategy``.
Classes are named by ``"module:Class"`` and imported only when selected (the Megatron ones need megatron-core, which
lives in ``.venv-megatron``), so this module stays torch-free and the config checks can ask whether a module exists
before Ray starts (:func:`worker_module_exists`).

Megatron keeps the reference policy inside the policy worker (``Role.ActorRolloutRef``, the reference built on the
actor's TP/PP/CP layout): megatron-core's parallel state is global to a process, so a second, colocated reference
worker would share it anyway (verl's colocated Megatron reference does the same).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__all__ = ["REFERENCE_IN_POLICY_WORKER", "WORKER_CLASSES", "import_worker_class", "worker_module_exists"]

_FSDP = "hybridrl.workers.fsdp_workers"
_FSDP_WORKERS = {
    "policy": f"{_FSDP}:ActorRolloutRefWorker",
    "async_policy": f"{_FSDP}:AsyncActorRolloutRefWorker",  # rollout.mode=async (server-mode rollout)
    "critic": f"{_FSDP}:CriticWorker",
    "reward_model": f"{_FSDP}:RewardModelWorker",
}
# strategy -> role kind -> "module:Class"; a kind missing from a strategy is not implemented for it
WORKER_CLASSES: dict[str, dict[str, str]] = {
    "fsdp": _FSDP_WORKERS,
    "fsdp2": _FSDP_WORKERS,
    "megatron": {
        "policy": "hybridrl.workers.megatron.worker:MegatronActorRolloutRefWorker",
        "critic": "hybridrl.workers.megatron.critic_worker:MegatronCriticWorker",
        "reward_model": "hybridrl.workers.megatron.reward_model_worker:MegatronRewardModelWorker",
    },
}
# strategies whose reference policy lives in the policy worker (Role.ActorRolloutRef) rather than a RefPolicy group
REFERENCE_IN_POLICY_WORKER = frozenset({"megatron"})


def _class_path(strategy: str, kind: str, strategy_key: str) -> str:
    """``"module:Class"`` of ``kind`` under ``strategy``; ValueError naming ``strategy_key`` when there is none."""
    if strategy not in WORKER_CLASSES:
        raise ValueError(f"{strategy_key}={strategy!r} is not a training strategy: use one of "
                         f"{', '.join(sorted(WORKER_CLASSES))}.")
    path = WORKER_CLASSES[strategy].get(kind)
    if path is None:
        raise ValueError(f"{strategy_key}={strategy!r} has no {kind.replace('_', ' ')} worker yet "
                         f"(implemented: {', '.join(sorted(WORKER_CLASSES[strategy]))}).")
    return path


def worker_module_exists(strategy: str, kind: str) -> bool:
    """Whether the module of ``kind``'s worker under ``strategy`` is part of this installation (nothing imported
    but its parent packages)."""
    path = WORKER_CLASSES.get(strategy, {}).get(kind)
    return path is not None and importlib.util.find_spec(path.split(":")[0]) is not None


def import_worker_class(strategy: str, kind: str, strategy_key: str) -> Any:
    """The worker class of ``kind`` (``policy``, ``async_policy``, ``critic``, ``reward_model``) under ``strategy``.

    Raises:
        ValueError: no such strategy, no such worker for it, or its module is not part of this version (the
            message names ``strategy_key``, e.g. ``critic.strategy``).
        ModuleNotFoundError: a dependency of the worker module is missing (e.g. megatron-core outside .venv-megatron).
    """
    module_name, class_name = _class_path(strategy, kind, strategy_key).split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:  # a dependency is missing, not the worker module itself
            raise
        raise ValueError(f"{strategy_key}={strategy!r}: this version of hybridrl has no {kind.replace('_', ' ')} "
                         f"worker for it ({module_name} is missing).") from error
    return getattr(module, class_name)
