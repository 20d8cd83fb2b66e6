"""``naive``: score each sample with one ``compute_score`` call; the score sits on the last valid response token."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from hybridrl.workers.reward_manager.abstract import AbstractRewardManager
from hybridrl.workers.reward_manager.registry import register


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    """verl's default manager.

    ``__call__(data)`` returns ``reward_tensor [B, R]`` (zeros except ``[i, valid_response_length_i - 1]``),
    or with ``return_dict=True`` ``{"reward_tensor", "reward_extra_info"}`` where ``reward_extra_info``
    maps every key of dict results to a per-sample list.
    """

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        from_rm = self._extract_reward_from_rm_scores(data, return_dict)
        if from_rm is not None:
            return from_rm
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        reward_extra_info: dict[str, list] = defaultdict(list)
        printed: dict = {}
        for i in range(len(data)):
            prompt_str, response_str, valid_response_length = self.decode_sample(data, i)
            data_source, ground_truth, extra_info = self.sample_fields(data, i)
            score, extra = self.score_sample(i, data_source, response_str, ground_truth, extra_info)
            for key, value in (extra or {}).items():
                reward_extra_info[key].append(value)
            reward_tensor[i, valid_response_length - 1] = score
            shown = dict(extra) if extra else {"score": score}
            self.maybe_print(
                printed,
                data_source,
                {"prompt": prompt_str, "response": response_str, "ground_truth": ground_truth, **shown},
            )
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": reward_extra_info}
        return reward_tensor
