"""``naive`` reward-loop manager: one ``compute_score`` call per sample (verl 0.9's default)."""

from __future__ import annotations

from typing import Any

from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase, score_result
from hybridrl.experimental.reward_loop.reward_manager.registry import register


@register("naive")
class NaiveRewardManager(RewardManagerBase):
    """Scores the decoded response (special tokens skipped) of one sample."""

    async def run_single(self, data: Any) -> dict:
        fields = self.sample_fields(data)
        solution_str = await self.decode(fields.valid_response_ids)
        result = await self.call_compute_score(**self.score_kwargs(fields, solution_str))
        return score_result(result)
