"""``prime``: score samples in parallel worker processes with a per-sample timeout (PRIME's manager).

Each sample runs ``compute_score(data_source, solution_str, ground_truth, extra_info)`` in a forked
process pool. A sample with no result ``timeout_s`` seconds (default 300, as verl) after submission
scores 0 with a logged warning, and the pool's processes are killed afterwards so a hung or looping
scorer cannot outlive the call. Raising / NaN / None follow the manager's ``on_error`` policy.
The scores are also stored as ``data.batch["acc"]`` ``[B]`` (verl's ``verify``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import torch

from hybridrl.workers.reward_manager.abstract import AbstractRewardManager
from hybridrl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)


def _kill_pool(executor: concurrent.futures.ProcessPoolExecutor) -> None:
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(timeout=5)


@register("prime")
class PrimeRewardManager(AbstractRewardManager):
    """Parallel scoring in ``num_processes`` processes; per-sample timeout → 0 with a warning."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable | None = None,
        reward_fn_key: str = "data_source",
        on_error: str = "raise",
        timeout_s: float = 300.0,
        num_processes: int = 64,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, on_error, timeout_s)
        self.num_processes = num_processes

    def _run_parallel(self, args: list[tuple]) -> list[tuple[str, Any]]:
        """``[(status, value)]`` per sample; status ∈ ``ok``, ``error``, ``timeout``."""
        workers = max(1, min(self.num_processes, len(args)))
        executor = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        outcomes: list[tuple[str, Any]] = []
        try:
            deadline = time.monotonic() + float(self.timeout_s)
            futures = [executor.submit(self.compute_score, *a) for a in args]
            for future in futures:
                try:
                    outcomes.append(("ok", future.result(timeout=max(0.0, deadline - time.monotonic()))))
                except concurrent.futures.TimeoutError:
                    outcomes.append(("timeout", None))
                except Exception as exc:
                    outcomes.append(("error", f"{type(exc).__name__}: {exc}"))
        finally:
            _kill_pool(executor)
        return outcomes

    def verify(self, data: Any) -> list[float]:
        """Score every sample; store ``data.batch["acc"]`` and return the scores."""
        args, sources = [], []
        for i in range(len(data)):
            _, response_str, _ = self.decode_sample(data, i)
            data_source, ground_truth, extra_info = self.sample_fields(data, i)
            args.append((data_source, response_str, ground_truth, extra_info))
            sources.append(data_source)
        scores = []
        for i, (status, value) in enumerate(self._run_parallel(args)):
            if status == "timeout":
                logger.warning(
                    "[Timeout] prime reward: sample %d (data_source=%r) got no score within %ss; scoring 0",
                    i,
                    sources[i],
                    self.timeout_s,
                )
                scores.append(0.0)
            elif status == "error":
                scores.append(self.failure(i, sources[i], value))
            else:
                scores.append(self.checked_score(i, sources[i], value)[0])
        data.batch["acc"] = torch.tensor(scores, dtype=torch.float32, device=data.batch["responses"].device)
        return scores

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        from_rm = self._extract_reward_from_rm_scores(data, return_dict)
        if from_rm is not None:
            return from_rm
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        scores = self.verify(data)
        printed: dict = {}
        for i, score in enumerate(scores):
            prompt_str, response_str, valid_response_length = self.decode_sample(data, i)
            data_source, ground_truth, _ = self.sample_fields(data, i)
            reward_tensor[i, valid_response_length - 1] = score
            self.maybe_print(
                printed,
                data_source,
                {"prompt": prompt_str, "response": response_str, "ground_truth": ground_truth, "score": score},
            )
        if return_dict:
            return {"reward_tensor": reward_tensor}
        return reward_tensor
