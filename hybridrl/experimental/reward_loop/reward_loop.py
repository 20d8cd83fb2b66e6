"""verl 0.9's reward loop: reward workers (Ray actors) that score a batch's samples concurrently.

::

    RewardLoopManager.compute_rm_score(batch [B])            (in the trainer process)
        │ split into k = min(reward.num_workers, B) consecutive chunks; workers are started on first use
        ▼
    RewardLoopWorker × k  (Ray actors)   compute_score_batch(chunk): one asyncio task per sample
        │   guarded(manager.run_single(sample))  -> fallback score on raise / timeout / NaN (guard.py)
        ▼
    {"reward_score", "reward_extra_info"} per sample  ->  rm_scores [B, R] + extra info [B] + judge counts

The manager class is ``reward.reward_manager.name`` from this package's registry (``source=register``), or
the class ``reward.reward_manager.module.name`` in the file ``reward.reward_manager.module.path``
(``source=importlib``). The scoring function is ``custom_reward_function.path/name`` (or verl 0.9's
``reward.custom_reward_function``), else :func:`~hybridrl.utils.reward_score.default_compute_score`.
A served reward model (``reward.reward_model.rollout``) is not part of this loop (those keys are refused); the
in-process reward model's ``rm_scores`` are returned unchanged, as the driver's managers do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import torch

from hybridrl.experimental.reward_loop.guard import ScoringPolicy, guarded, judge_metrics
from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase, get_event_loop
from hybridrl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls
from hybridrl.experimental.reward_loop.reward_manager.scoring_function import load_compute_score, select_setting
from hybridrl.protocol import DataProto


def resolve_reward_manager_cls(config: Any) -> type:
    """The reward-loop manager class the config names (module docstring)."""
    from hybridrl.utils.import_utils import load_extern_type

    source = select_setting(config, ("reward.reward_manager.source",))
    if source in (None, "register"):
        return get_reward_manager_cls(
            select_setting(config, ("reward_model.reward_manager", "reward.reward_manager.name"))
        )
    if source != "importlib":
        raise ValueError(f"reward.reward_manager.source={source!r} must be 'register' or 'importlib'")
    path = select_setting(config, ("reward.reward_manager.module.path",))
    name = select_setting(config, ("reward.reward_manager.module.name",))
    if not path:
        raise ValueError("reward.reward_manager.source=importlib needs reward.reward_manager.module.path (a .py file)")
    cls = load_extern_type(path, name, key="reward.reward_manager.module.path")
    if not (isinstance(cls, type) and issubclass(cls, RewardManagerBase)):
        raise TypeError(
            f"reward.reward_manager.module.name={name!r} in {path} must be a subclass of "
            "hybridrl.experimental.reward_loop.reward_manager.RewardManagerBase"
        )
    return cls


class RewardLoopWorker:
    """Scores samples concurrently with one reward manager (a Ray actor in :class:`RewardLoopManager`)."""

    def __init__(self, config: Any, reward_router_address: str | None = None, tokenizer: Any = None) -> None:
        self.config = config
        self.reward_router_address = reward_router_address
        self.input_tokenizer = tokenizer if tokenizer is not None else self._load_tokenizer()
        self.policy = ScoringPolicy.from_config(config)
        manager_cls = resolve_reward_manager_cls(config)
        self.reward_manager = manager_cls(
            config, self.input_tokenizer, load_compute_score(config), reward_router_address=reward_router_address
        )

    def _load_tokenizer(self) -> Any:
        from hybridrl.utils.tokenizer import hf_tokenizer

        model = self.config.actor_rollout_ref.model
        path = model.get("tokenizer_path", None) or model.path
        return hf_tokenizer(path, trust_remote_code=model.trust_remote_code)

    async def compute_score(self, data: DataProto) -> dict:
        """One sample's ``{"reward_score", "reward_extra_info"}`` (the fallback when the scorer fails)."""
        where = f"data_source={data.non_tensor_batch['data_source'][-1]!r}"
        return await guarded(self.reward_manager.run_single(data), self.policy, where)

    async def compute_score_batch(self, data: DataProto) -> list[dict]:
        """Every sample of ``data`` as its own task; results in row order."""
        return list(await asyncio.gather(*(self.compute_score(data[i : i + 1]) for i in range(len(data)))))

    def compute_score_batch_sync(self, data: DataProto) -> list[dict]:
        """:meth:`compute_score_batch` from code without a running event loop."""
        return get_event_loop().run_until_complete(self.compute_score_batch(data))


def _extra_columns(infos: list[dict]) -> dict[str, list]:
    """Per-key lists of the extra infos, keeping the keys every sample has (a failed one has fewer)."""
    if not infos:
        return {}
    common = set(infos[0]).intersection(*infos[1:])
    return {key: [info[key] for info in infos] for key in infos[0] if key in common}


# The non-tensor column where the agent loop leaves each sample's reward when it scored it while the batch
# was still generating (streaming); the reward stage then takes these instead of scoring again.
STREAMED_REWARD_KEY = "reward_loop_output"


def collect_scores(data: DataProto, outputs: list[dict], manager_cls: type) -> tuple[torch.Tensor, dict, dict]:
    """``(rm_scores [B, R], extra info {name: [B] values} with the judge flags, judge counts)`` of a batch."""
    rm_scores = manager_cls.assemble_rm_scores(data, [out["reward_score"] for out in outputs])
    extra = _extra_columns([out.get("reward_extra_info", None) or {} for out in outputs])
    return rm_scores, extra, judge_metrics(dict(extra))


class RewardLoopManager:
    """Splits a batch over ``reward.num_workers`` reward workers (Ray actors started on first use, at most one
    per sample of the batch) and assembles ``rm_scores``. Also callable like a driver reward manager."""

    def __init__(self, config: Any, rm_resource_pool: Any = None) -> None:
        self.config = config
        self.reward_manager_cls = resolve_reward_manager_cls(config)  # fails early on a bad name
        self.num_workers = int(select_setting(config, ("reward.num_workers", "reward_model.num_workers")) or 1)
        self.reward_loop_workers: list[Any] = []
        self._said_streaming = False

    def _workers_for(self, num_samples: int) -> list[Any]:
        import ray

        wanted = max(1, min(self.num_workers, num_samples))
        worker_cls = ray.remote(num_cpus=0)(RewardLoopWorker)
        while len(self.reward_loop_workers) < wanted:
            self.reward_loop_workers.append(worker_cls.remote(self.config))
        return self.reward_loop_workers[:wanted]

    @property
    def reward_loop_worker_handles(self) -> list[Any]:
        """All ``reward.num_workers`` workers (started now), for scoring inside the agent loop."""
        return self._workers_for(self.num_workers)

    def score_samples(self, data: DataProto) -> list[dict]:
        """Each sample's reward: the one streamed from the agent loop when every sample has it, else scored now."""
        import ray

        streamed = data.non_tensor_batch.get(STREAMED_REWARD_KEY, None)
        if streamed is not None and all(isinstance(out, dict) for out in streamed):
            if not self._said_streaming:
                print("[reward_loop] rewards stream from the agent loop: each sample scored as its loop ended", flush=True)
                self._said_streaming = True
            return list(streamed)

        workers = self._workers_for(len(data))
        bounds = np.linspace(0, len(data), len(workers) + 1).round().astype(int)
        refs = [w.compute_score_batch.remote(data[int(a) : int(b)]) for w, a, b in zip(workers, bounds, bounds[1:])]
        return [out for chunk in ray.get(refs) for out in chunk]

    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores [B, R]`` with the extra infos as non-tensor columns; ``meta_info``: ``reward_extra_keys``
        and ``reward_metrics`` (the batch's ``reward/judge_*`` counts)."""
        rm_scores, extra, metrics = collect_scores(data, self.score_samples(data), self.reward_manager_cls)
        return DataProto.from_dict(
            tensors={"rm_scores": rm_scores},
            non_tensors={key: np.array(values, dtype=object) for key, values in extra.items()},
            meta_info={"reward_extra_keys": list(extra), "reward_metrics": metrics},
        )

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict:
        """The driver reward managers' interface: ``reward_tensor [B, R]`` or ``{"reward_tensor",
        "reward_extra_info"}`` (the judge flags stay in ``reward_extra_info`` for the trainer to count).
        A batch that already has ``rm_scores`` (an in-process reward model) returns them, as the driver's do."""
        if "rm_scores" in data.batch.keys():
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]
        reward_tensor, extra, _ = collect_scores(data, self.score_samples(data), self.reward_manager_cls)
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra} if return_dict else reward_tensor
