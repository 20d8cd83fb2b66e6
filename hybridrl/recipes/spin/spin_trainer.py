"""RaySPINTrainer: SPIN (self-play fine-tuning) as online DPO whose chosen response is the SFT target.

    generate (rollout.n per prompt) ─► reward (metrics only) ─► SPINPairs: (SFT target, own generation) per sample
      ─► ref_log_prob ─► DPO update ─► every trainer.ref_update_freq steps: reference ← actor (next iteration)

The trainer is :class:`~hybridrl.recipes.online_dpo.dpo_trainer.RayOnlineDPOTrainer` given a
:class:`~hybridrl.recipes.online_dpo.dpo_update.DPOUpdate` whose pair builder is :class:`SPINPairs`.
Metrics added here: ``spin/identical_ratio`` (generations equal to their target, skipped) and
``spin/target_clip_ratio`` (targets cut to data.max_response_length).
"""

from __future__ import annotations

from typing import Any

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_trainer import OnlineDPOTaskRunner, RayOnlineDPOTrainer
from hybridrl.recipes.online_dpo.dpo_update import DPOUpdate
from hybridrl.recipes.online_dpo.pairs import build_pair_batch
from hybridrl.recipes.spin.targets import build_target_rows, spin_pairs, target_texts, tokenize_targets

__all__ = ["RaySPINTrainer", "SPINPairs", "SPINTaskRunner"]


class SPINPairs:
    """(SFT target, generation) for every generated response that differs from its target.

    Args:
        tokenizer: tokenizes the SFT targets.
        response_key: ``data.response_key``: where each row's SFT response is (``extra_info`` or a column).
    """

    def __init__(self, tokenizer: Any, response_key: str) -> None:
        self.tokenizer = tokenizer
        self.response_key = response_key

    def __call__(self, batch: DataProto, world_size: int, global_steps: int) -> tuple[DataProto | None, dict]:
        texts = target_texts(batch, self.response_key)
        response_length = batch.batch["responses"].shape[-1]
        target_ids, target_mask, truncated = tokenize_targets(texts, self.tokenizer, response_length)
        combined, pairs = spin_pairs(batch, build_target_rows(batch, target_ids, target_mask))
        num_rows = len(batch)
        metrics = {
            "dpo/num_pairs": float(len(pairs)),
            "dpo/pair_ratio": len(pairs) / max(num_rows, 1),
            "spin/identical_ratio": (num_rows - len(pairs)) / max(num_rows, 1),
            "spin/target_clip_ratio": truncated / max(num_rows, 1),
        }
        if not pairs:
            print(f"[spin] step {global_steps}: every generation equals its target; no DPO update", flush=True)
        return build_pair_batch(combined, pairs, world_size), metrics


class RaySPINTrainer(RayOnlineDPOTrainer):
    """SPIN (Chen et al. 2024, arXiv 2401.01335): the opponent is the reference, refreshed every iteration."""

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, **kwargs: Any) -> None:
        pairs = SPINPairs(tokenizer, config.data.response_key)
        kwargs.setdefault("update_stage", DPOUpdate.from_config(config, pairs))
        super().__init__(config, tokenizer, role_worker_mapping, resource_pool_manager, **kwargs)


class SPINTaskRunner(OnlineDPOTaskRunner):
    """The PPO TaskRunner building :class:`RaySPINTrainer`."""

    def trainer_class(self) -> type:
        return RaySPINTrainer
