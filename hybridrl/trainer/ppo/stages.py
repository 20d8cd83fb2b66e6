"""The stages of one PPO/GRPO step, each a small method that takes the batch and returns it enriched.

Batch keys each stage adds (B = samples, P = prompt length, R = response length):

    generate        prompts [B,P], responses [B,R], input_ids/attention_mask/position_ids [B,P+R]
                    (+ rollout_log_probs [B,R]); response_mask [B,R] on the driver
    reward          token_level_scores [B,R] (+ rm_scores from a reward model; extra infos)
    old_log_prob    old_log_probs [B,R]   (entropy only as the metric actor/entropy)
    ref             ref_log_prob [B,R]
    values          values [B,R]
    advantage       token_level_rewards, advantages, returns [B,R]
    update_critic   (metrics only)
    update_actor    (metrics only)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from copy import deepcopy
from typing import Any

import numpy as np
import torch

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
from hybridrl.trainer.ppo.driver_helpers import apply_kl_penalty, compute_advantage, compute_response_mask
from hybridrl.trainer.ppo.reward import compute_reward
from hybridrl.utils.metric import reduce_metrics
from hybridrl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance
from hybridrl.utils.timer import simple_timer

# Keys the rollout needs; everything else stays on the driver-side batch (verl 0.5's _get_gen_batch).
_GEN_TENSOR_KEYS = ["input_ids", "attention_mask", "position_ids"]
_GEN_NON_TENSOR_KEYS = ["raw_prompt_ids", "multi_modal_data", "raw_prompt", "tools_kwargs", "interaction_kwargs"]


class StageError(RuntimeError):
    """A training step failed; the message names the step and the stage (gen, reward, update_actor, ...)."""


class StagesMixin:
    """Stage methods of :class:`~hybridrl.trainer.ppo.ray_trainer.RayPPOTrainer` (state lives there)."""

    config: Any
    tokenizer: Any
    resource_pool_manager: Any
    _active_stage: str = "start"

    @contextmanager
    def _timed(self, name: str, timing_raw: dict) -> Iterator[None]:
        """Time a stage into ``timing_raw[name]`` and remember it, so a failure can name where it happened."""
        self._active_stage = name
        with simple_timer(name, timing_raw):
            yield

    # ------------------------------------------------------------------ rollout = generate + reward
    def _rollout(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto | None:
        """generate → reward: the step's scored batch. Recipes override this to build a step's batch from
        several generation batches (DAPO dynamic sampling) and return None while they need more prompts."""
        batch = self._generate(batch, metrics, timing_raw)
        batch, _ = self._compute_reward(batch, timing_raw)
        return batch

    # ------------------------------------------------------------------ generate
    def _pop_gen_batch(self, batch: DataProto) -> DataProto:
        non_tensor_keys = [k for k in _GEN_NON_TENSOR_KEYS if k in batch.non_tensor_batch]
        gen_batch = batch.pop(batch_keys=_GEN_TENSOR_KEYS, non_tensor_batch_keys=non_tensor_keys)
        gen_batch.meta_info.update(
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            do_sample=True,
            temperature=self.config.actor_rollout_ref.rollout.temperature,
            global_steps=self.global_steps,
            gen_batch_index=self._gen_batch_index(),
        )
        return gen_batch

    def _gen_batch_index(self) -> int:
        """Which generation batch of the current step this is (0 unless a recipe draws several per step)."""
        return 0

    def _generate(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        """uid per prompt → repeat n (interleaved) → generate → union; ReMax adds a greedy baseline."""
        n = self.config.actor_rollout_ref.rollout.n
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        gen_batch = self._pop_gen_batch(batch)
        with self._timed("gen", timing_raw):
            output = self.actor_rollout_wg.generate_sequences(gen_batch.repeat(n, interleave=True))
        timing_raw.update(output.meta_info.pop("timing", {}))
        metrics.update(reduce_metrics(output.meta_info.pop("metrics", {})))
        if self.config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
            with self._timed("gen_max", timing_raw):
                batch.batch["reward_baselines"] = self._remax_baseline(batch, gen_batch)
        batch = batch.repeat(n, interleave=True).union(output)
        if "response_mask" not in batch.batch.keys():
            batch.batch["response_mask"] = compute_response_mask(batch)
        if self.config.trainer.balance_batch:
            self._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        return batch

    def _remax_baseline(self, batch: DataProto, gen_batch: DataProto) -> torch.Tensor:
        """Greedy rollout's sequence reward per prompt, ``[B_prompts]``."""
        greedy = deepcopy(gen_batch)
        greedy.meta_info["do_sample"] = False
        output = self.actor_rollout_wg.generate_sequences(greedy)
        baseline_batch = deepcopy(batch).union(output)
        baseline_batch.batch["response_mask"] = compute_response_mask(baseline_batch)
        reward_tensor, _ = compute_reward(baseline_batch, self.reward_fn)
        return reward_tensor.sum(dim=-1)

    def _balance_batch(self, batch: DataProto, metrics: dict, logging_prefix: str = "global_seqlen") -> None:
        """Reorder rows so every data-parallel rank gets a similar token count (Karmarkar–Karp)."""
        seqlens = batch.batch["attention_mask"].sum(-1).tolist()
        world_size = self.actor_rollout_wg.world_size
        partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=world_size, equal_size=True)
        batch.reorder(torch.tensor([i for part in partitions for i in part]))
        metrics.update(log_seqlen_unbalance(seqlen_list=seqlens, partitions=partitions, prefix=logging_prefix))

    # ------------------------------------------------------------------ reward
    def _compute_reward(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto, dict]:
        with self._timed("reward", timing_raw):
            if self.use_rm and "rm_scores" not in batch.batch.keys():
                batch = batch.union(self.rm_wg.compute_rm_score(batch))
            reward_tensor, extra_info = compute_reward(batch, self.reward_fn)
        batch.batch["token_level_scores"] = reward_tensor
        if extra_info:
            batch.non_tensor_batch.update({k: np.array(v) for k, v in extra_info.items()})
        return batch, extra_info

    # ------------------------------------------------------------------ log-probs and values
    def _compute_old_log_prob(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        if not self.config.actor_rollout_ref.actor.recompute_old_log_prob:
            return batch  # on-policy update: the actor uses its current log-probs, detached (config-checked)
        with self._timed("old_log_prob", timing_raw):
            old = self.actor_rollout_wg.compute_log_prob(batch)
        entropys = old.batch.pop("entropys", None)
        if entropys is not None:
            loss_agg_mode = self.config.actor_rollout_ref.actor.loss_agg_mode
            entropy = agg_loss(loss_mat=entropys, loss_mask=batch.batch["response_mask"], loss_agg_mode=loss_agg_mode)
            metrics["actor/entropy"] = entropy.item()
        metrics.update(reduce_metrics(old.meta_info.pop("metrics", {})))
        batch = batch.union(old)
        if "rollout_log_probs" in batch.batch.keys():
            metrics.update(self._rollout_consistency_metrics(batch))
        return batch

    def _compute_ref_log_prob(self, batch: DataProto, timing_raw: dict) -> DataProto:
        with self._timed("ref", timing_raw):
            worker = self.actor_rollout_wg if self.ref_in_actor else self.ref_policy_wg
            return batch.union(worker.compute_ref_log_prob(batch))

    def _compute_values(self, batch: DataProto, timing_raw: dict) -> DataProto:
        with self._timed("values", timing_raw):
            return batch.union(self.critic_wg.compute_values(batch))

    # ------------------------------------------------------------------ advantages (driver)
    def _compute_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        algo = self.config.algorithm
        with self._timed("adv", timing_raw):
            if algo.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algo.kl_penalty)
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            # PF-PPO resamples rows: draw from a stream fixed by (data.seed, step), so runs and resumes repeat
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(self.config.data.seed) * 1_000_003 + self.global_steps)
                return compute_advantage(
                    batch,
                    adv_estimator=algo.adv_estimator,
                    gamma=algo.gamma,
                    lam=algo.lam,
                    num_repeat=self.config.actor_rollout_ref.rollout.n,
                    norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
                    config=algo,
                )

    # ------------------------------------------------------------------ updates
    def _update_models(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """Critic update, then the actor's once ``trainer.critic_warmup`` steps have passed.

        Under split placement (the critic on a resource pool of its own) the two updates use disjoint
        workers and need nothing from each other, so they run at the same time (verl's split-placement
        example does the same with a non-blocking critic call).
        """
        update_actor = self.config.trainer.critic_warmup <= self.global_steps
        if not (self.use_critic and update_actor and self._critic_has_own_pool()):
            if self.use_critic:
                self._update_critic(batch, metrics, timing_raw)
            if update_actor:
                self._update_actor(batch, metrics, timing_raw)
            return
        from concurrent.futures import ThreadPoolExecutor

        critic_metrics: dict = {}
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature  # before both read it
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="update_critic") as executor:
            critic_update = executor.submit(self._update_critic, batch, critic_metrics, timing_raw)
            self._update_actor(batch, metrics, timing_raw)
            self._active_stage = "update_critic"
            critic_update.result()  # re-raises the critic's failure
        metrics.update(critic_metrics)

    def _critic_has_own_pool(self) -> bool:
        from hybridrl.trainer.ppo.roles import Role

        mapping = getattr(self.resource_pool_manager, "mapping", {})
        actor_role = Role.ActorRolloutRef if Role.ActorRolloutRef in mapping else Role.ActorRollout
        return Role.Critic in mapping and mapping[Role.Critic] != mapping.get(actor_role)

    def _update_critic(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        with self._timed("update_critic", timing_raw):
            output = self.critic_wg.update_critic(batch)
        metrics.update(reduce_metrics(output.meta_info["metrics"]))

    def _update_actor(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        with self._timed("update_actor", timing_raw):
            output = self.actor_rollout_wg.update_actor(batch)
        metrics.update(reduce_metrics(output.meta_info["metrics"]))

    def _rollout_consistency_metrics(self, batch: DataProto) -> dict[str, float]:
        """training/rollout_probs_diff_{max,mean,std}, checked against the configured bound."""
        from hybridrl.workers.rollout.consistency import check_rollout_probs_diff, compute_rollout_probs_diff_metrics

        found = compute_rollout_probs_diff_metrics(
            batch.batch["rollout_log_probs"], batch.batch["old_log_probs"], batch.batch["response_mask"]
        )
        bound = self.config.trainer.get("rollout_probs_diff_max_bound", None)
        if bound is not None:
            check_rollout_probs_diff(found, bound)
        return found
