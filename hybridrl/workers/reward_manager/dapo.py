"""``dapo``: like ``naive`` plus DAPO's overlong-buffer length penalty (Yu et al., 2025, §3.4).

Notation: L = valid response length, L_max = ``max_resp_len``, B = ``overlong_buffer_cfg.len``,
f = ``overlong_buffer_cfg.penalty_factor``. With the buffer enabled::

    expected_len = L_max - B
    penalty      = min(-(L - expected_len) / B * f, 0)        (0 below expected_len, -f at L = L_max)
    reward       = score + penalty

With ``overlong_buffer_cfg.log`` the extras ``overlong_reward`` and ``overlong`` are recorded. An enabled
buffer needs L_max >= B > 0 (checked when the manager is built, as verl 0.9); a disabled one needs no L_max.
Non-dict scores are also recorded as ``acc``. A trailing eos string is stripped before scoring.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from hybridrl.workers.reward_manager.abstract import AbstractRewardManager
from hybridrl.workers.reward_manager.registry import register


def overlong_penalty(valid_response_length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """``min(-(L - (L_max - B)) / B * f, 0)``; e.g. L=90, L_max=100, B=20, f=1 → -(90-80)/20 = -0.5."""
    expected_len = max_resp_len - buffer_len
    return min(-(valid_response_length - expected_len) / buffer_len * penalty_factor, 0.0)


# Where users set the two lengths: hybridrl's keys, then verl 0.9's (its ``reward`` tree).
_MAX_RESP_LEN_KEYS = "reward_model.reward_kwargs.max_resp_len (default data.max_response_length; verl 0.9: "
_MAX_RESP_LEN_KEYS += "reward.reward_kwargs.max_resp_len)"
_BUFFER_LEN_KEYS = "reward_model.overlong_buffer.len (verl 0.9: reward.reward_kwargs.overlong_buffer_cfg.len)"
_TURN_OFF = "or turn the buffer off (reward_model.overlong_buffer.enable=False)"


class OverlongBufferError(ValueError, AssertionError):
    """A bad overlong-buffer setting: a ValueError naming the keys, and an AssertionError as verl 0.9's
    ``assert`` raises there, so code that catches verl's error keeps working."""


def check_overlong_buffer(max_resp_len: int | None, overlong_buffer_cfg: Any) -> None:
    """verl 0.9's checks of an enabled buffer: a length budget L_max, B > 0 and L_max >= B (B = L_max is allowed:
    the penalty then starts at the first token). A disabled or absent buffer needs nothing.

    Raises:
        OverlongBufferError: naming the keys to change (the messages start with verl's).
    """
    if overlong_buffer_cfg is None or not overlong_buffer_cfg["enable"]:
        return
    buffer_len = overlong_buffer_cfg["len"]
    if max_resp_len is None:
        raise OverlongBufferError(
            f"max_resp_len must be provided when the DAPO overlong buffer is enabled: set {_MAX_RESP_LEN_KEYS}, "
            f"{_TURN_OFF}."
        )
    if max_resp_len < buffer_len:
        raise OverlongBufferError(
            f"max_resp_len must be larger than overlong_buffer.len (or equal), got max_resp_len={max_resp_len} < "
            f"len={buffer_len}, so every response would be penalised: raise {_MAX_RESP_LEN_KEYS} or lower "
            f"{_BUFFER_LEN_KEYS}."
        )
    if not buffer_len > 0:
        raise OverlongBufferError(
            f"overlong_buffer.len must be positive when the overlong penalty is enabled, got {buffer_len}: set "
            f"{_BUFFER_LEN_KEYS} > 0, {_TURN_OFF}."
        )


@register("dapo")
class DAPORewardManager(AbstractRewardManager):
    """Score like ``naive``; add :func:`overlong_penalty` when ``overlong_buffer_cfg.enable``."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable | None = None,
        reward_fn_key: str = "data_source",
        max_resp_len: int | None = None,
        overlong_buffer_cfg: Any = None,
        on_error: str = "raise",
        timeout_s: float | None = None,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, on_error, timeout_s)
        check_overlong_buffer(max_resp_len, overlong_buffer_cfg)
        self.max_resp_len, self.overlong_buffer_cfg = max_resp_len, overlong_buffer_cfg

    def _score_one(self, data: Any, i: int, reward_extra_info: dict, printed: dict) -> tuple[float, int]:
        prompt_str, response_str, valid_response_length = self.decode_sample(data, i)
        eos = self.tokenizer.eos_token
        if eos and response_str.endswith(eos):
            response_str = response_str[: -len(eos)]
        data_source, ground_truth, extra_info = self.sample_fields(data, i)
        score, extra = self.score_sample(i, data_source, response_str, ground_truth, extra_info)
        for key, value in (extra or {"acc": score}).items():
            reward_extra_info[key].append(value)
        reward = score
        cfg = self.overlong_buffer_cfg
        if cfg is not None and cfg["enable"]:
            penalty = overlong_penalty(valid_response_length, self.max_resp_len, cfg["len"], cfg["penalty_factor"])
            reward += penalty
            if cfg["log"]:
                reward_extra_info["overlong_reward"].append(penalty)
                reward_extra_info["overlong"].append(penalty < 0)
        self.maybe_print(
            printed,
            data_source,
            {
                "prompt": prompt_str,
                "response": response_str,
                "ground_truth": ground_truth,
                **(extra or {"score": score}),
            },
        )
        return reward, valid_response_length

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        from_rm = self._extract_reward_from_rm_scores(data, return_dict)
        if from_rm is not None:
            return from_rm
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        reward_extra_info: dict[str, list] = defaultdict(list)
        printed: dict = {}
        for i in range(len(data)):
            reward, valid_response_length = self._score_one(data, i, reward_extra_info, printed)
            reward_tensor[i, valid_response_length - 1] = reward
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": reward_extra_info}
        return reward_tensor
