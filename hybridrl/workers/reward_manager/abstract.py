"""Shared pieces of the reward managers: decoding a sample, validating a score, error policy.

Error policy (``on_error``): a scoring function that raises, exceeds ``timeout_s``, or returns
None / NaN / a non-number is either turned into a :class:`RewardFunctionError` naming the sample
index, its data source and the function (``"raise"``, the default), or logged and scored 0.0 (``"zero"``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

_ON_ERROR = ("raise", "zero")


class RewardFunctionError(RuntimeError):
    """A reward function failed on one sample."""


class ScoreTimeout(TimeoutError):
    """A manager's own per-call alarm fired (``compute_score_timeout``): handled by the manager, not the policy."""


def function_name(fn: Callable) -> str:
    inner = getattr(fn, "func", fn)  # functools.partial
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"


class AbstractRewardManager:
    """Common constructor, ``rm_scores`` short-cut, sample decoding and score checking."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable | None = None,
        reward_fn_key: str = "data_source",
        on_error: str = "raise",
        timeout_s: float | None = None,
    ) -> None:
        from hybridrl.utils.reward_score import default_compute_score

        if on_error not in _ON_ERROR:
            raise ValueError(f"reward manager on_error={on_error!r} must be one of {_ON_ERROR}")
        self.tokenizer = tokenizer
        self.num_examine = num_examine  # samples printed per data source and call
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.on_error = on_error
        self.timeout_s = timeout_s

    def _extract_reward_from_rm_scores(self, data: Any, return_dict: bool) -> Any:
        if "rm_scores" not in data.batch.keys():
            return None
        return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]

    def decode_sample(self, data: Any, i: int) -> tuple[str, str, int]:
        """``(prompt_str, response_str, valid_response_length)`` of row ``i`` (special tokens skipped)."""
        prompts, responses = data.batch["prompts"], data.batch["responses"]
        prompt_length = prompts.shape[-1]
        mask = data.batch["attention_mask"][i]
        valid_prompt_length = int(mask[:prompt_length].sum())
        valid_response_length = int(mask[prompt_length:].sum())
        prompt_ids = prompts[i, prompt_length - valid_prompt_length :]
        response_ids = responses[i, :valid_response_length]
        prompt_str = self.tokenizer.decode(prompt_ids, skip_special_tokens=True)
        response_str = self.tokenizer.decode(response_ids, skip_special_tokens=True)
        return prompt_str, response_str, valid_response_length

    def sample_fields(self, data: Any, i: int) -> tuple[str, Any, Any]:
        """``(data_source, ground_truth, extra_info)`` of row ``i``."""
        non_tensor = data.non_tensor_batch
        ground_truth = non_tensor["reward_model"][i]["ground_truth"]
        data_source = non_tensor[self.reward_fn_key][i]
        extra_info = non_tensor["extra_info"][i] if "extra_info" in non_tensor else None
        if "__num_turns__" in non_tensor:
            extra_info = {**(extra_info or {}), "num_turns": non_tensor["__num_turns__"][i]}
        return data_source, ground_truth, extra_info

    def call_with_timeout(self, fn: Callable, **kwargs: Any) -> Any:
        """Call ``fn(**kwargs)``; with ``timeout_s`` set, give up after that many seconds (TimeoutError)."""
        if self.timeout_s is None:
            return fn(**kwargs)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            return pool.submit(fn, **kwargs).result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError as exc:
            raise TimeoutError(f"no result after timeout_s={self.timeout_s}") from exc
        finally:
            pool.shutdown(wait=False)  # a hung thread cannot be killed; it is abandoned

    def failure(self, i: int, data_source: Any, reason: str) -> float:
        """Apply the error policy to a failed sample: raise, or log and return 0.0."""
        message = (
            f"reward function {function_name(self.compute_score)} failed on sample {i} "
            f"(data_source={data_source!r}): {reason}"
        )
        if self.on_error == "raise":
            raise RewardFunctionError(
                message + ". Fix the function, or set on_error='zero' (reward_model.reward_kwargs.on_error=zero) "
                "to score such samples 0."
            )
        logger.warning("%s; scoring 0 (on_error=zero)", message)
        return 0.0

    def checked_score(self, i: int, data_source: Any, result: Any) -> tuple[float, dict | None]:
        """``(score, extra dict or None)`` from a scorer result; NaN / None / non-numbers go to :meth:`failure`."""
        extra = None
        if isinstance(result, dict):
            if "score" not in result:
                return self.failure(i, data_source, f"returned a dict without a 'score' key: {sorted(result)}"), None
            extra, result = result, result["score"]
        if (isinstance(result, torch.Tensor) and result.numel() == 1) or isinstance(result, np.generic):
            result = result.item()
        if isinstance(result, bool):
            result = float(result)
        if not isinstance(result, (int, float)):
            return self.failure(i, data_source, f"returned {result!r} ({type(result).__name__}), not a number"), extra
        if not math.isfinite(float(result)):
            return self.failure(i, data_source, f"returned a non-finite score {result!r}"), extra
        return float(result), extra

    def score_sample(
        self, i: int, data_source: Any, response_str: str, ground_truth: Any, extra_info: Any
    ) -> tuple[float, dict | None]:
        """``compute_score`` on sample ``i`` (with the timeout); a raise becomes :meth:`failure`; checked result."""
        try:
            result = self.call_with_timeout(
                self.compute_score,
                data_source=data_source,
                solution_str=response_str,
                ground_truth=ground_truth,
                extra_info=extra_info,
            )
        except ScoreTimeout:
            raise
        except Exception as exc:
            result = self.failure(i, data_source, f"{type(exc).__name__}: {exc}")
        return self.checked_score(i, data_source, result)

    def maybe_print(self, printed: dict, data_source: Any, lines: dict[str, Any]) -> None:
        """Print up to ``num_examine`` samples per data source (verl's ``[prompt]/[response]/...`` lines)."""
        if printed.get(data_source, 0) >= self.num_examine:
            return
        printed[data_source] = printed.get(data_source, 0) + 1
        for key, value in lines.items():
            print(f"[{key}]", value)
