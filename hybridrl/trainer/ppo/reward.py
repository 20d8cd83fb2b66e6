"""Build the reward function from the config and call it (verl 0.5 ``trainer/ppo/reward.py``).

- :func:`get_custom_reward_fn`: ``custom_reward_function.path`` / ``.name`` with
  ``custom_reward_function.reward_kwargs`` bound as keyword arguments.
- :func:`load_reward_manager`: ``reward_model.reward_manager`` picks the class; it gets the custom
  function or :func:`~hybridrl.utils.reward_score.default_compute_score`.
- :func:`compute_reward`: ``(reward_tensor [B, R], reward_extra_infos_dict)``.
- :func:`uses_reward_loop`: when the reward loop (:mod:`hybridrl.experimental.reward_loop`, Ray reward workers)
  scores instead of a driver manager: a manager only the loop has (``limit``/``rate_limited``, ``remote``), a
  manager class from a file (``reward.reward_manager.source=importlib``), an ``async def`` compute_score, or
  ``reward_kwargs.fallback_score`` set. Plain rule rewards stay in the trainer process: starting reward
  workers costs more than scoring a small batch there (docs/status.md has the numbers).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo.protocols import RewardManager

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def get_custom_reward_fn(config: DictConfig) -> Callable | None:
    """The user's scoring function with ``reward_kwargs`` bound (a ``functools.partial``, so it pickles into the
    prime manager's processes), or None when no path is configured; loaded by the reward loop's loader, the one
    reader of ``custom_reward_function.*`` in either verl spelling.

    Raises:
        FileNotFoundError / AttributeError / RuntimeError naming ``custom_reward_function.path`` / ``.name``.
    """
    from hybridrl.experimental.reward_loop.reward_manager.scoring_function import load_compute_score

    fn = load_compute_score(config)
    if fn is not None:
        print(f"using customized reward function '{fn.func.__name__}' from '{inspect.getsourcefile(fn.func)}'")
    return fn


def _default_score_fn(config: DictConfig) -> Callable:
    from hybridrl.utils.reward_score import default_compute_score

    sandbox = config.reward_model.get("sandbox_fusion", None) or {}
    memory_limit_mb = sandbox.get("memory_limit_mb", None)
    if memory_limit_mb:
        return functools.partial(default_compute_score, memory_limit_mb=memory_limit_mb)
    return default_compute_score


def uses_reward_loop(config: DictConfig) -> bool:
    """Whether ``config`` selects the reward loop (module docstring)."""
    from hybridrl.workers.reward_manager import REWARD_MANAGER_REGISTRY

    if OmegaConf.select(config, "reward.reward_manager.source") == "importlib":
        return True
    if config.reward_model.reward_manager not in REWARD_MANAGER_REGISTRY:
        from hybridrl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

        return config.reward_model.reward_manager in REWARD_MANAGER
    for section in ("reward_model", "reward"):  # hybridrl's spelling of reward_kwargs, and verl 0.9's
        if OmegaConf.select(config, f"{section}.reward_kwargs.fallback_score") is not None:
            return True
    from hybridrl.experimental.reward_loop.reward_manager.scoring_function import load_compute_score

    return inspect.iscoroutinefunction(load_compute_score(config))  # loads without printing


def load_reward_manager(
    config: DictConfig, tokenizer: PreTrainedTokenizerBase, num_examine: int, **reward_kwargs: Any
) -> RewardManager:
    """Instantiate ``reward_model.reward_manager`` (default ``naive``) for ``config`` (the whole config).

    With :func:`uses_reward_loop` it is a :class:`~hybridrl.experimental.reward_loop.RewardLoopManager` (called
    like a manager). Otherwise ``reward_kwargs`` go to the manager's constructor (e.g. ``on_error="zero"``, ``timeout_s``; for
    ``batch`` the rest is forwarded to the scoring function). For ``dapo``, ``max_resp_len`` defaults to
    ``data.max_response_length`` and ``overlong_buffer_cfg`` to ``reward_model.overlong_buffer``.
    """
    from hybridrl.workers.reward_manager import get_reward_manager_cls

    if uses_reward_loop(config):
        from hybridrl.experimental.reward_loop import RewardLoopManager

        return RewardLoopManager(config)
    name = config.reward_model.reward_manager
    manager_cls = get_reward_manager_cls(name)
    compute_score = get_custom_reward_fn(config) or _default_score_fn(config)
    if name == "dapo":
        reward_kwargs.setdefault("max_resp_len", config.data.get("max_response_length", None))
        reward_kwargs.setdefault("overlong_buffer_cfg", config.reward_model.get("overlong_buffer", None))
    return manager_cls(
        tokenizer=tokenizer,
        num_examine=num_examine,
        compute_score=compute_score,
        reward_fn_key=config.data.reward_fn_key,
        **reward_kwargs,
    )


def compute_reward(data: DataProto, reward_fn: RewardManager | Callable) -> tuple[torch.Tensor, dict[str, list]]:
    """``(reward_tensor [B, R], reward_extra_infos_dict)``; managers without dict output give ``{}``.

    Unlike verl, errors of the reward function are not swallowed here: verl retries without
    ``return_dict`` on *any* exception, which hides the real error.
    """
    try:
        result = reward_fn(data, return_dict=True)
    except TypeError as exc:
        if "return_dict" not in str(exc):
            raise
        return reward_fn(data), {}
    if isinstance(result, dict):
        return result["reward_tensor"], dict(result.get("reward_extra_info", {}) or {})
    return result, {}


def streaming_reward_handles(config: DictConfig, reward_fn: Any) -> list | None:
    """Reward workers for the agent loop to score each sample as it ends (verl 0.9's streaming rewards): with the
    reward loop and no reward model (rule rewards); None otherwise."""
    from hybridrl.experimental.reward_loop import RewardLoopManager

    if not isinstance(reward_fn, RewardLoopManager) or config.reward_model.enable:
        return None
    return reward_fn.reward_loop_worker_handles


def judge_metrics(reward_extra_info: dict) -> dict[str, float]:
    """Pop the reward loop's per-sample judge flags off ``reward_extra_info``: ``reward/judge_errors`` and
    ``reward/judge_timeouts`` (counts in the batch); ``{}`` for the driver's managers, which set no flags."""
    from hybridrl.experimental.reward_loop.guard import judge_metrics as count

    return count(reward_extra_info)


def compute_reward_async(
    data: DataProto, config: DictConfig | None = None, tokenizer: PreTrainedTokenizerBase | None = None,
    reward_fn: RewardManager | Callable | None = None,
) -> tuple[torch.Tensor, dict[str, list]]:
    """Plain-function form of verl's ``compute_reward_async`` (the trainer may wrap it in ``ray.remote``)."""
    if reward_fn is None:
        if config is None or tokenizer is None:
            raise ValueError("compute_reward_async needs reward_fn, or config and tokenizer to build one")
        reward_fn = load_reward_manager(
            config, tokenizer, num_examine=0, **(config.reward_model.get("reward_kwargs", None) or {})
        )
    return compute_reward(data, reward_fn)
