"""``naive``: score each sample with one ``compute_score`` call; the score sits on the last valid response token.

``compute_score_timeout`` (seconds, verl 0.9's argument; set it with ``reward_model.reward_kwargs``) bounds each
call with ``SIGALRM``: a call that runs longer scores 0.0 and training goes on. The alarm only works on the
main thread; elsewhere the call runs without it (verl's behaviour; ``timeout_s`` works on any thread).
"""

from __future__ import annotations

import logging
import signal
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from hybridrl.workers.reward_manager.abstract import AbstractRewardManager, ScoreTimeout
from hybridrl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)


@contextmanager
def _score_timeout(seconds: float | None) -> Iterator[None]:
    """Raise ``TimeoutError`` when the block runs longer than ``seconds`` (None or 0: no limit; not on the main
    thread: no limit, as no signal handler can be installed there)."""
    if not seconds or seconds <= 0:
        yield
        return

    def _handler(signum: int, frame: Any) -> None:
        raise ScoreTimeout(f"compute_score timed out after {seconds}s")

    try:
        old_handler = signal.signal(signal.SIGALRM, _handler)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    """verl's default manager.

    ``__call__(data)`` returns ``reward_tensor [B, R]`` (zeros except ``[i, valid_response_length_i - 1]``),
    or with ``return_dict=True`` ``{"reward_tensor", "reward_extra_info"}`` where ``reward_extra_info``
    maps every key of dict results to a per-sample list.
    """

    def __init__(self, *args: Any, compute_score_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compute_score_timeout = compute_score_timeout

    def score_sample(
        self, i: int, data_source: Any, response_str: str, ground_truth: Any, extra_info: Any
    ) -> tuple[float, dict | None]:
        """As the base class; with ``compute_score_timeout`` a call past it scores 0.0 (logged)."""
        try:
            with _score_timeout(self.compute_score_timeout):
                return super().score_sample(i, data_source, response_str, ground_truth, extra_info)
        except ScoreTimeout as exc:
            logger.warning("sample %d (data_source=%r): %s; scored 0.0", i, data_source, exc)
            return 0.0, None

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
