"""The reward-loop manager's contract (verl 0.9 ``RewardManagerBase``): ``async run_single(data)`` scores one sample.

``run_single`` takes a one-row :class:`~hybridrl.protocol.DataProto` (``responses [1, R]``, ``attention_mask
[1, P + R]``, ``data_source``, ``reward_model.ground_truth``, optional ``extra_info``) and returns
``{"reward_score": float, "reward_extra_info": {name: value}}``. A dict result of ``compute_score`` gives its
``score`` and every key as extra info; a number is also recorded as ``acc`` (verl's rule).

``compute_score(data_source, solution_str, ground_truth, extra_info)`` may be a plain function (run in the
event loop's thread pool, so a slow one does not block the other samples) or an ``async def`` (awaited).
With a served reward model the call also gets ``reward_router_address`` and ``reward_model_tokenizer``.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

RawRewardFn = Callable[..., Any] | None

_PROCESS_LOOP: asyncio.AbstractEventLoop | None = None


def get_event_loop() -> asyncio.AbstractEventLoop:
    """The running event loop, or one loop kept for this process (so class-level semaphores stay on one loop)."""
    global _PROCESS_LOOP
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        if _PROCESS_LOOP is None or _PROCESS_LOOP.is_closed():
            _PROCESS_LOOP = asyncio.new_event_loop()
        return _PROCESS_LOOP


@dataclass(frozen=True)
class SampleFields:
    """What ``compute_score`` is called with, read from one row."""

    data_source: Any
    ground_truth: Any
    extra_info: dict
    valid_response_ids: torch.Tensor  # [L]
    valid_response_length: int  # L


def score_result(result: Any) -> dict:
    """``{"reward_score", "reward_extra_info"}`` from a scorer's result: a dict's ``score`` and all its keys,
    or a number (recorded as ``acc`` too)."""
    if isinstance(result, dict):
        return {"reward_score": result["score"], "reward_extra_info": dict(result)}
    return {"reward_score": result, "reward_extra_info": {"acc": result}}


class RewardManagerBase(ABC):
    """Holds the config, the tokenizer and the scoring function; subclasses implement :meth:`run_single`."""

    _class_initialized = False

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: RawRewardFn,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
    ) -> None:
        from hybridrl.utils.reward_score import default_compute_score

        self.config = config
        self.tokenizer = tokenizer
        self.compute_score = compute_score or default_compute_score
        self.is_async_reward_score = inspect.iscoroutinefunction(self.compute_score)
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        self.init_class(config, tokenizer)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return get_event_loop()

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        """Set up state shared by every instance of the class in this process (once)."""
        if cls._class_initialized:
            return
        cls._class_initialized = True

    @abstractmethod
    async def run_single(self, data: Any) -> dict:
        raise NotImplementedError

    @classmethod
    def assemble_rm_scores(cls, data: Any, scores: list[float]) -> torch.Tensor:
        """``rm_scores [B, R]``: zeros except each row's score on its last valid response token."""
        prompt_length = data.batch["prompts"].size(1)
        valid_response_length = data.batch["attention_mask"][:, prompt_length:].sum(dim=1)
        rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        rows = torch.arange(rm_scores.size(0))
        rm_scores[rows, valid_response_length - 1] = torch.tensor(scores, dtype=torch.float32)
        return rm_scores

    # ------------------------------------------------------------------------ helpers for run_single
    def sample_fields(self, data: Any) -> SampleFields:
        """The last row's fields (multi-sequence outputs are scored on their last sequence, as verl)."""
        item = data[len(data) - 1]
        response_ids = item.batch["responses"]
        valid_length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        non_tensor = item.non_tensor_batch
        extra_info = dict(non_tensor.get("extra_info", None) or {})
        if non_tensor.get("tool_extra_fields", None) is not None:
            extra_info.update(non_tensor["tool_extra_fields"].items())
        if "__num_turns__" in non_tensor:
            extra_info["num_turns"] = non_tensor["__num_turns__"]
        return SampleFields(
            data_source=non_tensor["data_source"],
            ground_truth=non_tensor["reward_model"]["ground_truth"],
            extra_info=extra_info,
            valid_response_ids=response_ids[:valid_length],
            valid_response_length=valid_length,
        )

    async def decode(self, token_ids: torch.Tensor) -> str:
        return await self.loop.run_in_executor(None, lambda: self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def score_kwargs(self, fields: SampleFields, solution_str: str) -> dict:
        kwargs = {
            "data_source": fields.data_source,
            "solution_str": solution_str,
            "ground_truth": fields.ground_truth,
            "extra_info": fields.extra_info,
        }
        if self.reward_router_address is not None:
            kwargs["reward_router_address"] = self.reward_router_address
            kwargs["reward_model_tokenizer"] = self.reward_model_tokenizer
        return kwargs

    async def call_compute_score(self, **kwargs: Any) -> Any:
        """Await an ``async def`` scorer; run a plain one in the loop's thread pool."""
        if self.is_async_reward_score:
            return await self.compute_score(**kwargs)
        return await self.loop.run_in_executor(None, lambda: self.compute_score(**kwargs))
