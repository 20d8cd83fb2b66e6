"""DAPO dynamic sampling (Yu et al. 2025, arXiv 2503.14476, §3.2): keep only prompt groups that teach something.

A group is the ``rollout.n`` responses of one prompt (same ``uid``). With a group-relative estimator a group
whose responses all score the same has zero advantage everywhere, so it only dilutes the batch. DAPO draws
generation batches of ``data.gen_batch_size`` prompts, drops such groups, and accumulates the survivors until
``data.train_batch_size`` prompts are kept; the excess is trimmed.

Notation: B = responses in a generation batch, G = prompts kept so far, T = ``data.train_batch_size``.

    std_g = population std (numpy's default, as verl) of the metric over the responses of group g
    keep g  ⇔  std_g > 0  or  |g| = 1
    step batch = the first T kept groups, in the order they were generated

Deviations from verl's recipe (``recipe/dapo/dapo_ray_trainer.py``):
- the excess is trimmed by whole groups (first T uids) instead of by rows (``batch[:T·n]``); identical while
  groups are contiguous, and still correct after the trainer reorders rows for sequence balancing;
- ``seq_final_reward`` reads ``token_level_rewards`` when present, else ``token_level_scores`` (hybridrl adds
  the in-reward KL after the reference log-probs, so at filtering time they are the scores, as verl's
  filtering also sees them without KL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hybridrl.protocol import DataProto

__all__ = ["DynamicSampler", "StepBatch", "group_metric_values", "kept_group_uids"]


def group_metric_values(batch: DataProto, metric: str) -> np.ndarray:
    """The per-response value of ``algorithm.filter_groups.metric``, ``[B]`` float64.

    ``seq_reward`` = Σ_t token_level_scores, ``seq_final_reward`` = Σ_t token_level_rewards; other names
    (``acc``, ``score``, ...) are reward extras the reward manager stored in ``non_tensor_batch``.
    """
    if metric in ("seq_reward", "seq_final_reward"):
        assert batch.batch is not None, "a scored generation batch has tensors"
        has_rewards = "token_level_rewards" in batch.batch.keys()
        key = "token_level_rewards" if metric == "seq_final_reward" and has_rewards else "token_level_scores"
        return batch.batch[key].sum(dim=-1).double().cpu().numpy()
    if metric not in batch.non_tensor_batch:
        extras = sorted(k for k in batch.non_tensor_batch if k not in ("uid", "raw_prompt_ids", "data_source"))
        raise ValueError(
            f"algorithm.filter_groups.metric={metric!r} is not in the batch: the reward function returned the extras "
            f"{extras}. Use algorithm.filter_groups.metric=seq_reward (or seq_final_reward), or make "
            f"compute_score return a dict with a {metric!r} entry (reward_model.reward_manager=dapo records 'acc')."
        )
    return np.asarray(batch.non_tensor_batch[metric], dtype=np.float64)


def kept_group_uids(uids: np.ndarray, values: np.ndarray) -> list[str]:
    """uids (first-appearance order) whose values vary, or that have a single response.

    Args:
        uids: ``[B]`` group id of every response.
        values: ``[B]`` the filter metric of every response.
    """
    groups: dict[str, list[float]] = {}
    for uid, value in zip(uids.tolist(), values.tolist(), strict=True):
        groups.setdefault(uid, []).append(value)
    return [uid for uid, vals in groups.items() if len(vals) == 1 or float(np.std(vals)) > 0]


@dataclass(frozen=True)
class StepBatch:
    """A full training batch and how many generation batches it took."""

    batch: DataProto  # [T·n rows]
    num_gen_batches: int


@dataclass
class DynamicSampler:
    """Accumulate filtered generation batches until ``train_batch_size`` prompts are kept.

    ``add`` returns None while more prompts are needed, and raises once ``max_num_gen_batches`` (> 0)
    generation batches did not fill a step.
    """

    train_batch_size: int
    metric: str
    max_num_gen_batches: int = 0
    num_gen_batches: int = 0
    kept_uids: list[str] = field(default_factory=list)
    parts: list[DataProto] = field(default_factory=list)

    def add(self, batch: DataProto) -> StepBatch | None:
        """Filter one scored generation batch (rows carry ``uid``) into the pending step batch."""
        self.num_gen_batches += 1
        uids = batch.non_tensor_batch["uid"]
        kept = kept_group_uids(uids, group_metric_values(batch, self.metric))
        self.kept_uids.extend(kept)
        kept_set = set(kept)
        rows = [i for i, uid in enumerate(uids.tolist()) if uid in kept_set]
        if rows:
            self.parts.append(batch.select_idxs(rows))
        if len(self.kept_uids) < self.train_batch_size:
            self._check_budget()
            return None
        return self._pop_step_batch()

    def _check_budget(self) -> None:
        limit = self.max_num_gen_batches
        if 0 < limit <= self.num_gen_batches:
            raise ValueError(
                f"DAPO dynamic sampling: {self.num_gen_batches} generation batches "
                f"(algorithm.filter_groups.max_num_gen_batches={limit}) kept only {len(self.kept_uids)} of "
                f"data.train_batch_size={self.train_batch_size} prompts whose {self.metric!r} varies within the group. "
                "The data may be too hard or too easy for the model: raise algorithm.filter_groups.max_num_gen_batches "
                "(0 = no limit) or data.gen_batch_size, raise actor_rollout_ref.rollout.n, or use data of mixed difficulty."
            )

    def _pop_step_batch(self) -> StepBatch:
        keep = set(self.kept_uids[: self.train_batch_size])
        meta_info = {k: v for k, v in self.parts[0].meta_info.items() if k != "global_token_num"}
        for part in self.parts:  # per-row lists (global_token_num) differ between parts: rebuilt by the trainer
            part.meta_info = {}
        merged = DataProto.concat(self.parts) if len(self.parts) > 1 else self.parts[0]
        rows = [i for i, uid in enumerate(merged.non_tensor_batch["uid"].tolist()) if uid in keep]
        step = merged.select_idxs(rows)
        step.meta_info = meta_info
        result = StepBatch(batch=step, num_gen_batches=self.num_gen_batches)
        self.num_gen_batches, self.kept_uids, self.parts = 0, [], []
        return result
