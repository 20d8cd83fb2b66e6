"""``dapo`` reward-loop manager: ``naive`` plus DAPO's overlong-buffer penalty.

The penalty and its checks are the driver manager's (:func:`~hybridrl.workers.reward_manager.dapo.overlong_penalty`,
:func:`~hybridrl.workers.reward_manager.dapo.check_overlong_buffer`). Settings, first found wins:
``reward.reward_kwargs.{overlong_buffer_cfg, max_resp_len}`` (verl 0.9), then
``reward_model.reward_kwargs.max_resp_len`` / ``reward_model.overlong_buffer`` / ``data.max_response_length``.
"""

from __future__ import annotations

from typing import Any

from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase, score_result
from hybridrl.experimental.reward_loop.reward_manager.registry import register
from hybridrl.workers.reward_manager.dapo import check_overlong_buffer, overlong_penalty


def _section(config: Any, *path: str) -> Any:
    for name in path:
        config = config.get(name, None) if config is not None else None
    return config or {}


def dapo_settings(config: Any) -> tuple[int | None, Any]:
    """``(max_resp_len, overlong_buffer_cfg)`` from the verl 0.9 keys, else hybridrl's (module docstring)."""
    verl_kwargs = _section(config, "reward", "reward_kwargs")
    if "overlong_buffer_cfg" in verl_kwargs or "max_resp_len" in verl_kwargs:
        return verl_kwargs.get("max_resp_len", None), verl_kwargs.get("overlong_buffer_cfg", None)
    legacy = _section(config, "reward_model")
    max_resp_len = _section(legacy, "reward_kwargs").get("max_resp_len", None)
    if max_resp_len is None:
        max_resp_len = _section(config, "data").get("max_response_length", None)
    return max_resp_len, legacy.get("overlong_buffer", None)


@register("dapo")
class DAPORewardManager(RewardManagerBase):
    """Scores like ``naive``; with the buffer enabled adds ``min(-(L - (L_max - B)) / B * f, 0)``."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any, **kwargs: Any) -> None:
        super().__init__(config, tokenizer, compute_score, **kwargs)
        self.max_resp_len, self.overlong_buffer_cfg = dapo_settings(config)
        check_overlong_buffer(self.max_resp_len, self.overlong_buffer_cfg)

    async def run_single(self, data: Any) -> dict:
        fields = self.sample_fields(data)
        solution_str = await self.decode(fields.valid_response_ids)
        eos = getattr(self.tokenizer, "eos_token", None)
        if eos and solution_str.endswith(eos):
            solution_str = solution_str[: -len(eos)]
        out = score_result(await self.call_compute_score(**self.score_kwargs(fields, solution_str)))
        cfg = self.overlong_buffer_cfg
        if cfg is not None and cfg["enable"]:
            penalty = overlong_penalty(
                fields.valid_response_length, self.max_resp_len, cfg["len"], cfg["penalty_factor"]
            )
            out["reward_score"] += penalty
            if cfg["log"]:
                out["reward_extra_info"]["overlong_reward"] = penalty
                out["reward_extra_info"]["overlong"] = penalty < 0
        return out
