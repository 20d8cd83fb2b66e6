"""RaySPINTrainer: SPIN (self-play fine-tuning) as online DPO whose chosen response is the SFT target.

    generate (rollout.n per prompt) ─► reward (metrics only) ─► pairs: (SFT target, own generation) per sample
      ─► ref_log_prob ─► DPO update ─► every trainer.ref_update_freq steps: reference ← actor (next iteration)

Everything but ``_make_pairs`` is :class:`~hybridrl.recipes.online_dpo.dpo_trainer.RayOnlineDPOTrainer`'s.
Metrics added here: ``spin/identical_ratio`` (generations equal to their target, skipped) and
``spin/target_clip_ratio`` (targets cut to data.max_response_length).
"""

from __future__ import annotations

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_trainer import OnlineDPOTaskRunner, RayOnlineDPOTrainer
from hybridrl.recipes.online_dpo.pairs import build_pair_batch
from hybridrl.recipes.spin.targets import build_target_rows, spin_pairs, target_texts, tokenize_targets

__all__ = ["RaySPINTrainer", "SPINTaskRunner"]


class RaySPINTrainer(RayOnlineDPOTrainer):
    """SPIN (Chen et al. 2024, arXiv 2401.01335): the opponent is the reference, refreshed every iteration."""

    def _make_pairs(self, batch: DataProto, metrics: dict) -> DataProto | None:
        """(SFT target, generation) for every generated response that differs from its target."""
        texts = target_texts(batch, self.config.data.response_key)
        response_length = batch.batch["responses"].shape[-1]
        target_ids, target_mask, truncated = tokenize_targets(texts, self.tokenizer, response_length)
        combined, pairs = spin_pairs(batch, build_target_rows(batch, target_ids, target_mask))
        num_rows = len(batch)
        metrics.update(
            {
                "dpo/num_pairs": float(len(pairs)),
                "dpo/pair_ratio": len(pairs) / max(num_rows, 1),
                "spin/identical_ratio": (num_rows - len(pairs)) / max(num_rows, 1),
                "spin/target_clip_ratio": truncated / max(num_rows, 1),
            }
        )
        if not pairs:
            print(f"[spin] step {self.global_steps}: every generation equals its target; no DPO update", flush=True)
        return build_pair_batch(combined, pairs, self.actor_rollout_wg.world_size)


class SPINTaskRunner(OnlineDPOTaskRunner):
    """The PPO TaskRunner building :class:`RaySPINTrainer`."""

    def trainer_class(self) -> type:
        return RaySPINTrainer
