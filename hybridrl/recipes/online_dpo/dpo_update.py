"""Online DPO's update stage: the trainer part that replaces PPO's log-probs, advantages and updates.

    scored batch ─► pair builder (best vs worst response per prompt; SPIN: SFT target vs own generation)
                 ─► ref_log_prob of the pair rows ──────────────────────────────► ref (the actor's process)
                 ─► DPO update ─────────────────────────────────────────────────► update_actor_dpo
                 ─► every trainer.ref_update_freq steps: reference ← actor ─────► sync_ref_from_actor

Pair rows are ``(chosen, rejected, …)``, padded with weight-0 pairs to a multiple of the world size. Metrics:
``dpo/num_pairs`` (real pairs), ``dpo/pair_ratio`` (pairs per prompt), ``dpo/chosen_score/mean``,
``dpo/rejected_score/mean``; the update adds ``actor/dpo_loss``, ``actor/rewards_{chosen,rejected}``,
``actor/reward_{accuracy,margin}``. The step's data metrics are PPO's that mean something without advantages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from omegaconf import DictConfig

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_actor import DPOHyperParams
from hybridrl.recipes.online_dpo.pairs import build_pair_batch, select_best_worst_pairs
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.metric_utils import compute_data_metrics
from hybridrl.trainer.ppo.stages import timed
from hybridrl.trainer.ppo.worker_groups import WorkerGroups
from hybridrl.utils.metric import reduce_metrics

__all__ = ["BestWorstPairs", "DPOUpdate", "PairBuilder", "score_and_length_metrics"]


class PairBuilder(Protocol):
    """Preference pairs of a scored batch, as pair rows for ``update_actor_dpo`` (None: no pair this step)."""

    def __call__(self, batch: DataProto, world_size: int, global_steps: int) -> tuple[DataProto | None, dict]: ...


class BestWorstPairs:
    """Best vs worst response of each prompt (by summed ``token_level_scores``); ties skipped."""

    def __call__(self, batch: DataProto, world_size: int, global_steps: int) -> tuple[DataProto | None, dict]:
        scores = batch.batch["token_level_scores"].sum(-1)
        pairs = select_best_worst_pairs(list(batch.non_tensor_batch["uid"]), scores)
        num_prompts = len(set(batch.non_tensor_batch["uid"]))
        if not pairs:
            print(f"[online_dpo] step {global_steps}: every prompt's responses tie; no DPO update", flush=True)
        return build_pair_batch(batch, pairs, world_size), _pair_metrics(pairs, scores, num_prompts)


@dataclass(frozen=True)
class DPOUpdate:
    """Pairs → reference log-probs → DPO update (→ reference refresh).

    Args:
        make_pairs: the pair builder (:class:`BestWorstPairs`, or SPIN's).
        hyper: ``algorithm.dpo`` (beta, loss type, label smoothing), sent with every update.
        temperature: ``actor_rollout_ref.rollout.temperature``, for the actor's log-probs.
        ref_update_freq: ``trainer.ref_update_freq``: every that many steps the reference becomes the actor
            (SPIN's iteration boundary); <= 0: never.
    """

    make_pairs: PairBuilder
    hyper: DPOHyperParams
    temperature: float
    ref_update_freq: int

    @classmethod
    def from_config(cls, config: DictConfig, make_pairs: PairBuilder) -> DPOUpdate:
        dpo = config.algorithm.dpo
        return cls(
            make_pairs=make_pairs,
            hyper=DPOHyperParams(float(dpo.beta), str(dpo.loss_type), float(dpo.label_smoothing)),
            temperature=config.actor_rollout_ref.rollout.temperature,
            ref_update_freq=int(config.trainer.ref_update_freq or -1),
        )

    def run(self, batch: DataProto, workers: WorkerGroups, global_steps: int) -> tuple[DataProto, dict[str, Any]]:
        actor = workers.actor_rollout
        pairs, metrics = self.make_pairs(batch, actor.world_size, global_steps)
        if pairs is not None:
            pairs, ref_metrics = stages.ref_log_prob(pairs, workers.ref)
            metrics = {**metrics, **ref_metrics, **self._update(pairs, actor)}
        if self.ref_update_freq > 0 and global_steps % self.ref_update_freq == 0:
            with timed("update_ref", metrics):
                actor.sync_ref_from_actor()
        return batch, metrics

    def _update(self, pairs: DataProto, actor: Any) -> dict[str, Any]:
        pairs.meta_info.update(self.hyper.as_meta(), temperature=self.temperature)  # pair rows built this step
        metrics: dict[str, Any] = {}
        with timed("update_actor", metrics):
            output = actor.update_actor_dpo(pairs)
        return {**metrics, **reduce_metrics(output.meta_info["metrics"])}

    def data_metrics(self, batch: DataProto, workers: WorkerGroups) -> dict[str, Any]:
        return score_and_length_metrics(batch)

    def after_resume(self, workers: WorkerGroups, global_steps: int) -> None:
        """With ``ref_update_freq`` the reference is re-synced from the restored actor, which is exact when the
        checkpoint step is a multiple of ``ref_update_freq`` (the reference was synced right then)."""
        if global_steps <= 0 or self.ref_update_freq <= 0:
            return
        if global_steps % self.ref_update_freq:
            print(f"[online_dpo] resuming at step {global_steps}, not a multiple of trainer.ref_update_freq="
                  f"{self.ref_update_freq}: the reference restarts from the restored actor", flush=True)
        workers.actor_rollout.sync_ref_from_actor()


def _pair_metrics(pairs: list[tuple[int, int]], scores: torch.Tensor, num_prompts: int) -> dict[str, float]:
    metrics = {"dpo/num_pairs": float(len(pairs)), "dpo/pair_ratio": len(pairs) / max(num_prompts, 1)}
    if pairs:
        chosen, rejected = (torch.tensor(rows) for rows in zip(*pairs))
        metrics["dpo/chosen_score/mean"] = scores[chosen].float().mean().item()
        metrics["dpo/rejected_score/mean"] = scores[rejected].float().mean().item()
    return metrics


def score_and_length_metrics(batch: DataProto) -> dict[str, float]:
    """PPO's data metrics that mean something without advantages: ``critic/score/*``, ``critic/rewards/*``
    (the same: no KL in the reward), ``response_length/*``, ``prompt_length/*``."""
    tensors = batch.batch
    zeros = torch.zeros_like(tensors["token_level_scores"])
    view = DataProto.from_dict(
        tensors={
            **{k: tensors[k] for k in ("responses", "attention_mask", "response_mask", "token_level_scores")},
            "token_level_rewards": tensors["token_level_scores"],
            "advantages": zeros,
            "returns": zeros,
        },
        non_tensors={
            k: np.asarray(v) for k, v in batch.non_tensor_batch.items() if k in ("__num_turns__", "tool_call_counts")
        },
    )
    metrics = compute_data_metrics(batch=view, use_critic=False)
    return {k: v for k, v in metrics.items() if not k.startswith(("critic/advantages", "critic/returns"))}
