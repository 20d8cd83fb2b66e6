"""``remote``: score in separate processes (Ray actors), for CPU-heavy scoring (e.g. math-verify) that would
hold the GIL or misbehave in a thread. ``reward.num_workers`` processes per manager, used round-robin.
The scoring function must be a plain (not ``async``) function that pickles (a module-level function or a
``functools.partial`` of one).
"""

from __future__ import annotations

import itertools
from typing import Any

from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase, score_result
from hybridrl.experimental.reward_loop.reward_manager.registry import register


class RewardComputeWorker:
    """One scoring process (wrapped in ``ray.remote`` when built); its methods are plain, not async."""

    def __init__(self, compute_score_fn: Any = None, config: Any = None) -> None:
        if config is not None:  # the user's function is loaded here from its file: such a module does not pickle
            from hybridrl.experimental.reward_loop.reward_manager.scoring_function import load_compute_score

            compute_score_fn = load_compute_score(config)
        if compute_score_fn is None:
            from hybridrl.utils.reward_score import default_compute_score

            compute_score_fn = default_compute_score
        self.compute_score_fn = compute_score_fn

    def compute_score(self, **kwargs: Any) -> Any:
        return self.compute_score_fn(**kwargs)

    def pid(self) -> int:
        import os

        return os.getpid()


@register("remote")
class RemoteRewardManager(RewardManagerBase):
    """Sends each sample's ``compute_score`` call to the next of its scoring processes."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any, **kwargs: Any) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        super().__init__(config, tokenizer, compute_score, **kwargs)
        if self.is_async_reward_score:
            raise ValueError(
                "reward.reward_manager.name=remote runs compute_score in other processes and needs a plain "
                "function; this one is `async def`: use reward.reward_manager.name=naive (async functions run "
                "concurrently there) or make it synchronous."
            )
        num_workers = config["reward"]["num_workers"]
        worker_cls = ray.remote(num_cpus=0)(RewardComputeWorker)
        node = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
        from hybridrl.experimental.reward_loop.reward_manager.scoring_function import load_compute_score

        # a function from custom_reward_function.path is re-loaded in each process; any other is pickled
        args = {"config": config} if load_compute_score(config) is not None else {"compute_score_fn": compute_score}
        self.reward_worker = [worker_cls.options(scheduling_strategy=node).remote(**args) for _ in range(num_workers)]
        self.reward_worker_pool = itertools.cycle(self.reward_worker)

    def choose_reward_worker(self) -> Any:
        return next(self.reward_worker_pool)

    async def run_single(self, data: Any) -> dict:
        fields = self.sample_fields(data)
        solution_str = await self.decode(fields.valid_response_ids)
        worker = self.choose_reward_worker()
        result = await worker.compute_score.remote(**self.score_kwargs(fields, solution_str))
        return score_result(result)
