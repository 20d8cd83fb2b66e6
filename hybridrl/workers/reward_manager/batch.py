"""``batch``: one vectorised ``compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kw)`` call."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from hybridrl.workers.reward_manager.abstract import AbstractRewardManager
from hybridrl.workers.reward_manager.registry import register


@register("batch")
class BatchRewardManager(AbstractRewardManager):
    """Decode the whole batch, score it in one call (``**reward_kwargs`` forwarded), place the scores."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable,
        reward_fn_key: str = "data_source",
        on_error: str = "raise",
        timeout_s: float | None = None,
        **reward_kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, on_error, timeout_s)
        self.reward_kwargs = reward_kwargs

    def verify(self, data: Any) -> tuple[list, list[int], list[str], list[str]]:
        """``(raw scores, valid response lengths, prompt strings, response strings)``."""
        decoded = [self.decode_sample(data, i) for i in range(len(data))]
        fields = [self.sample_fields(data, i) for i in range(len(data))]
        try:
            scores = self.call_with_timeout(
                self.compute_score,
                data_sources=[f[0] for f in fields],
                solution_strs=[d[1] for d in decoded],
                ground_truths=[f[1] for f in fields],
                extra_infos=[f[2] for f in fields],
                **self.reward_kwargs,
            )
        except Exception as exc:
            scores = [self.failure(-1, "<whole batch>", f"{type(exc).__name__}: {exc}")] * len(data)
        if scores is None or len(scores) != len(data):
            got = "None" if scores is None else f"{len(scores)} scores"
            scores = [self.failure(-1, "<whole batch>", f"returned {got} for a batch of {len(data)}")] * len(data)
        return list(scores), [d[2] for d in decoded], [d[0] for d in decoded], [d[1] for d in decoded]

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        from_rm = self._extract_reward_from_rm_scores(data, return_dict)
        if from_rm is not None:
            return from_rm
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        reward_extra_info: dict[str, list] = defaultdict(list)
        printed: dict = {}
        scores, lengths, prompt_strs, response_strs = self.verify(data)
        for i, raw in enumerate(scores):
            data_source, ground_truth, _ = self.sample_fields(data, i)
            score, extra = self.checked_score(i, data_source, raw)
            for key, value in (extra or {}).items():
                reward_extra_info[key].append(value)
            reward_tensor[i, lengths[i] - 1] = score
            self.maybe_print(
                printed,
                data_source,
                {"prompt": prompt_strs[i], "response": response_strs[i], "ground_truth": ground_truth, "score": score},
            )
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": reward_extra_info}
        return reward_tensor
