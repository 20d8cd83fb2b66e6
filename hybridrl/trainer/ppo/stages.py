"""The stages of one PPO/GRPO step: functions that take the batch and return ``(batch, metrics)``.

A stage never changes the DataProto it is given (it works on a shallow copy: same tensors, new key maps) nor
any dict passed in; the worker groups it calls and the settings are explicit arguments. Its wall time is in
its metrics as ``timing_s/<stage>`` (verl's metric name), and an exception escaping it is a
:class:`StageError` naming the stage.

Batch keys each stage adds (B = samples, P = prompt length, R = response length):

    generate        uid; prompts [B,P], responses [B,R], input_ids/attention_mask/position_ids [B,P+R]
                    (+ rollout_log_probs [B,R]); response_mask [B,R]; ReMax: reward_baselines [B]
    reward          token_level_scores [B,R] (+ rm_scores from a reward model; reward extras per row)
    old_log_prob    old_log_probs [B,R]   (entropy only as the metric actor/entropy; rollout-correction bypass
                    mode: the rollout_log_probs, no forward); sum_pi_squared [B,R] with
                    actor.calculate_sum_pi_squared (the optimal-token-baseline estimators read it)
    ref_log_prob    ref_log_prob [B,R]
    values          values [B,R]
    advantage       token_level_rewards, advantages, returns [B,R]; rollout correction (decoupled, after the
                    KL penalty as verl): rollout_is_weights [B,R], response_mask with rejected tokens zeroed
    update_critic   (metrics only)
    update_actor    (metrics only; bypass mode: meta_info["rollout_correction"] tells the actor)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from omegaconf import DictConfig

from hybridrl.algos.kl import KLController
from hybridrl.algos.rollout_correction import (
    RolloutCorrectionParams,
    compute_rollout_correction,
    rollout_correction_params,
)
from hybridrl.protocol import DataProto
from hybridrl.protocol.keys import ROLLOUT_ROW_KEY
from hybridrl.trainer.ppo.batch_advantage import (
    apply_kl_penalty,
    compute_advantage,
    compute_response_mask,
    gdpo_reward_metrics,
)
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
from hybridrl.trainer.ppo.protocols import (
    ActorRolloutGroup,
    CriticGroup,
    RefGroup,
    RewardManager,
    RewardModelGroup,
    RolloutGroup,
)
from hybridrl.trainer.ppo.reward import compute_reward, judge_metrics
from hybridrl.utils.metric import reduce_metrics
from hybridrl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "StageError", "StepSettings", "advantage", "balance_order", "finalize_rollout_batch", "finish_generation",
    "generate", "prepare_generation",
    "align_rows", "old_log_prob", "ref_log_prob", "remax_baseline", "reward", "rollout_correction", "timed",
    "update_actor", "update_critic", "values", "with_row_columns",
]

Metrics = dict[str, Any]

# Keys the rollout needs; everything else stays on the driver-side batch (verl 0.5's _get_gen_batch).
_GEN_TENSOR_KEYS = ["input_ids", "attention_mask", "position_ids"]
_GEN_NON_TENSOR_KEYS = ["raw_prompt_ids", "multi_modal_data", "multi_modal_inputs", "raw_prompt",
                         "tools_kwargs", "interaction_kwargs"]
TIMING_PREFIX = "timing_s/"
# PF-PPO's resampling draws from a stream fixed by (data.seed, step): seed · _SEED_STRIDE + step.
_SEED_STRIDE = 1_000_003


class StageError(RuntimeError):
    """A training step failed; the message names the stage (gen, reward, update_actor, ...) and, once the
    controller has caught it, the step."""

    def __init__(self, stage: str, cause: str, step: int | None = None) -> None:
        where = f"training step {step} failed in stage '{stage}'" if step is not None else f"stage '{stage}' failed"
        super().__init__(f"{where}: {cause}")
        self.stage, self.cause, self.step = stage, cause, step

    def __reduce__(self) -> tuple[Any, ...]:  # crosses the Ray actor boundary: rebuild from the fields
        return type(self), (self.stage, self.cause, self.step)


@contextmanager
def timed(stage: str, metrics: Metrics) -> Iterator[None]:
    """Add the block's seconds to ``metrics["timing_s/<stage>"]`` (a dict the caller owns); an exception
    escaping the block becomes a :class:`StageError` naming ``stage`` (an inner stage's passes unchanged)."""
    start = time.perf_counter()
    try:
        yield
    except StageError:
        raise
    except Exception as error:
        raise StageError(stage, f"{type(error).__name__}: {error}") from error
    key = TIMING_PREFIX + stage
    metrics[key] = metrics.get(key, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class StepSettings:
    """The config values the stages read, resolved once (the YAML holds the defaults; none are restated)."""

    rollout_n: int  # actor_rollout_ref.rollout.n: responses per prompt
    eos_token_id: int | list[int] | None  # the tokenizer's (generation stops at any of a list)
    pad_token_id: int | None
    balance_batch: bool  # trainer.balance_batch: reorder rows so every rank gets similar token counts
    remax_baseline: bool  # algorithm.adv_estimator == remax: a greedy rollout per prompt gives the baseline
    recompute_old_log_prob: bool  # actor_rollout_ref.actor.recompute_old_log_prob
    loss_agg_mode: str  # actor_rollout_ref.actor.loss_agg_mode (aggregates actor/entropy)
    rollout_probs_diff_max_bound: float | None  # trainer.rollout_probs_diff_max_bound
    algorithm: DictConfig  # the algorithm section: estimator, gamma, lam, in-reward KL, estimator options
    data_seed: int  # data.seed
    rollout_correction: RolloutCorrectionParams  # algorithm.rollout_correction, parsed

    @classmethod
    def from_config(cls, config: DictConfig, tokenizer: PreTrainedTokenizerBase) -> StepSettings:
        actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
        return cls(
            rollout_n=rollout.n,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
            balance_batch=config.trainer.balance_batch,
            remax_baseline=config.algorithm.adv_estimator == AdvantageEstimator.REMAX,
            recompute_old_log_prob=actor.recompute_old_log_prob, loss_agg_mode=actor.loss_agg_mode,
            rollout_probs_diff_max_bound=config.trainer.rollout_probs_diff_max_bound,
            algorithm=config.algorithm, data_seed=int(config.data.seed),
            rollout_correction=rollout_correction_params(config.algorithm.rollout_correction),
        )


def _copy(batch: DataProto) -> DataProto:
    """A DataProto sharing ``batch``'s tensors and arrays, with key maps of its own (safe to add keys to)."""
    tensors = batch.batch.clone(recurse=False) if batch.batch is not None else None
    return DataProto(batch=tensors, non_tensor_batch=dict(batch.non_tensor_batch), meta_info=dict(batch.meta_info))


def _timing(worker_timing: dict[str, float]) -> Metrics:
    return {TIMING_PREFIX + name: seconds for name, seconds in worker_timing.items()}


# ---------------------------------------------------------------------------- generate
def generate(
    prompts: DataProto, actor_rollout: RolloutGroup, settings: StepSettings, *, global_steps: int,
    gen_batch_index: int = 0, reward_fn: RewardManager | None = None,
) -> tuple[DataProto, Metrics]:
    """uid per prompt → repeat n (interleaved) → generate → union → response_mask → balance rows.

    ReMax (``settings.remax_baseline``) adds ``reward_baselines``: the reward (``reward_fn``) of each prompt's
    greedy response. ``gen_batch_index`` numbers the generation batches of one step (DAPO draws several).
    """
    batch, gen_batch = prepare_generation(prompts, actor_rollout, settings, global_steps=global_steps,
                                          gen_batch_index=gen_batch_index)
    metrics: Metrics = {}
    with timed("gen", metrics):
        output = actor_rollout.generate_sequences(gen_batch.repeat(settings.rollout_n, interleave=True))
    if settings.remax_baseline:
        with timed("gen_max", metrics):
            batch.batch["reward_baselines"] = remax_baseline(batch, gen_batch, actor_rollout, reward_fn)
    return finish_generation(batch, output, settings, actor_rollout.world_size, metrics)


def prepare_generation(
    prompts: DataProto, rollout: RolloutGroup, settings: StepSettings, *, global_steps: int, gen_batch_index: int = 0
) -> tuple[DataProto, DataProto]:
    """``(batch, gen_batch)``: the driver-side batch (+ ``uid`` per prompt; the rollout's keys popped) and what
    the rollout is sent once repeated ``rollout.n`` times, interleaved (its meta_info seeds the sampling by
    ``global_steps`` and ``gen_batch_index``)."""
    batch = _copy(prompts)
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    non_tensor_keys = [k for k in _GEN_NON_TENSOR_KEYS if k in batch.non_tensor_batch]
    gen_batch = with_row_columns(batch.pop(batch_keys=_GEN_TENSOR_KEYS, non_tensor_batch_keys=non_tensor_keys),
                                 batch, rollout)
    gen_batch.meta_info.update(  # per-call values only: the sampling parameters are the rollout's config
        eos_token_id=settings.eos_token_id, pad_token_id=settings.pad_token_id, do_sample=True,
        global_steps=global_steps, gen_batch_index=gen_batch_index,
    )
    return batch, gen_batch


def finish_generation(
    batch: DataProto, output: DataProto, settings: StepSettings, world_size: int, metrics: Metrics | None = None
) -> tuple[DataProto, Metrics]:
    """Join the rollout's ``output`` to the driver-side ``batch`` of :func:`prepare_generation`: the rollout's
    timing and metrics, the union, ``response_mask`` and the rows balanced over ``world_size`` actor ranks."""
    metrics = dict(metrics or {})
    metrics.update(_timing(output.meta_info.pop("timing", {})))
    metrics.update(reduce_metrics(output.meta_info.pop("metrics", {})))
    batch = align_rows(batch.repeat(settings.rollout_n, interleave=True), output).union(output)
    if "response_mask" not in batch.batch.keys():
        batch.batch["response_mask"] = compute_response_mask(batch)
    batch, balance_metrics = finalize_rollout_batch(batch, world_size, settings.balance_batch)
    return batch, {**metrics, **balance_metrics}


def align_rows(batch: DataProto, output: DataProto) -> DataProto:
    """``batch``'s rows for ``output``'s samples: the same rows, unless an agent loop gave a row several samples
    (or none), in which case ``output`` says each sample's row (``__rollout_row__``, removed here)."""
    rows = output.non_tensor_batch.pop(ROLLOUT_ROW_KEY, None)
    return batch if rows is None else batch.select_idxs(np.asarray(rows, dtype=np.int64))


def with_row_columns(gen_batch: DataProto, batch: DataProto, rollout: RolloutGroup) -> DataProto:
    """Agent loops read every column of their row (``extra_info``, ``agent_name``, ...): a rollout that says so
    (``reads_row_columns``, the AgentLoopManager) gets the batch's remaining non-tensor columns too (the same
    arrays; they come back unchanged, and ``union`` checks they agree), as verl does in async mode."""
    if getattr(rollout, "reads_row_columns", False):
        gen_batch.non_tensor_batch.update(batch.non_tensor_batch)
    return gen_batch


def remax_baseline(
    prompts: DataProto, gen_batch: DataProto, actor_rollout: RolloutGroup, reward_fn: RewardManager | None
) -> torch.Tensor:
    """Greedy rollout's sequence reward per prompt, ``[B_prompts]`` (ReMax, Li et al. 2023, arXiv 2310.10505)."""
    greedy = deepcopy(gen_batch)
    greedy.meta_info["do_sample"] = False
    output = actor_rollout.generate_sequences(greedy)
    baseline_batch = deepcopy(prompts).union(output)
    baseline_batch.batch["response_mask"] = compute_response_mask(baseline_batch)
    reward_tensor, _ = compute_reward(baseline_batch, reward_fn)
    return reward_tensor.sum(dim=-1)


def balance_order(batch: DataProto, world_size: int, prefix: str = "global_seqlen") -> tuple[torch.Tensor, Metrics]:
    """Row order that gives every data-parallel rank a similar token count (Karmarkar–Karp), ``[B]``, and the
    ``{prefix}/*`` imbalance metrics."""
    seqlens = batch.batch["attention_mask"].sum(-1).tolist()
    partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=world_size, equal_size=True)
    order = torch.tensor([i for part in partitions for i in part])
    return order, log_seqlen_unbalance(seqlen_list=seqlens, partitions=partitions, prefix=prefix)


def finalize_rollout_batch(batch: DataProto, world_size: int, balance: bool) -> tuple[DataProto, Metrics]:
    """Balance rows across ranks (when ``balance``) and record ``meta_info["global_token_num"]`` (per-row tokens)."""
    batch = _copy(batch)
    metrics: Metrics = {}
    if balance:
        order, metrics = balance_order(batch, world_size)
        batch.reorder(order)
    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
    return batch, metrics


# ---------------------------------------------------------------------------- reward
def reward(
    batch: DataProto, reward_fn: RewardManager, rm: RewardModelGroup | None = None
) -> tuple[DataProto, Metrics]:
    """``token_level_scores`` from the reward function (after the reward model's ``rm_scores`` when ``rm``)."""
    batch = _copy(batch)
    metrics: Metrics = {}
    with timed("reward", metrics):
        if rm is not None and "rm_scores" not in batch.batch.keys():
            batch = batch.union(rm.compute_rm_score(batch))
        reward_tensor, extra_info = compute_reward(batch, reward_fn)
    metrics.update(judge_metrics(extra_info))  # reward/judge_errors, reward/judge_timeouts (reward loop only)
    batch.batch["token_level_scores"] = reward_tensor
    if extra_info:
        batch.non_tensor_batch.update({k: np.array(v) for k, v in extra_info.items()})
    return batch, metrics


# ---------------------------------------------------------------------------- log-probs and values
def old_log_prob(
    batch: DataProto, actor_rollout: ActorRolloutGroup, settings: StepSettings
) -> tuple[DataProto, Metrics]:
    """The actor's log-probs of the sampled responses (skipped for a purely on-policy update, config-checked;
    rollout-correction bypass mode: the rollout's log-probs serve as the old ones)."""
    if settings.rollout_correction.bypass_mode:
        return _rollout_log_probs_as_old(batch), {}
    if not settings.recompute_old_log_prob:
        return batch, {}  # the actor uses its current log-probs, detached
    batch = _copy(batch)
    metrics: Metrics = {}
    with timed("old_log_prob", metrics):
        old = actor_rollout.compute_log_prob(batch)
    entropys = old.batch.pop("entropys", None)
    if entropys is not None:
        entropy = agg_loss(loss_mat=entropys, loss_mask=batch.batch["response_mask"],
                           loss_agg_mode=settings.loss_agg_mode)
        metrics["actor/entropy"] = entropy.item()
    metrics.update(reduce_metrics(old.meta_info.pop("metrics", {})))
    batch = batch.union(old)
    if "rollout_log_probs" in batch.batch.keys():
        metrics.update(_rollout_consistency_metrics(batch, settings.rollout_probs_diff_max_bound))
    return batch, metrics


def _rollout_log_probs_as_old(batch: DataProto) -> DataProto:
    """Bypass mode (verl 0.9): ``old_log_probs = rollout_log_probs``, no forward."""
    if "rollout_log_probs" not in batch.batch.keys():
        raise KeyError(
            "algorithm.rollout_correction.bypass_mode=True needs rollout_log_probs in the batch: set "
            "actor_rollout_ref.rollout.calculate_log_probs=True"
        )
    batch = _copy(batch)
    batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]
    return batch


def _rollout_consistency_metrics(batch: DataProto, bound: float | None) -> Metrics:
    """training/rollout_probs_diff_{max,mean,std}, checked against ``bound`` when set."""
    from hybridrl.workers.rollout.consistency import check_rollout_probs_diff, compute_rollout_probs_diff_metrics

    found = compute_rollout_probs_diff_metrics(
        batch.batch["rollout_log_probs"], batch.batch["old_log_probs"], batch.batch["response_mask"]
    )
    if bound is not None:
        check_rollout_probs_diff(found, bound)
    return found


def ref_log_prob(batch: DataProto, ref: RefGroup) -> tuple[DataProto, Metrics]:
    """The reference policy's log-probs (``ref``: its own group, or the actor's with LoRA off)."""
    metrics: Metrics = {}
    with timed("ref", metrics):
        output = ref.compute_ref_log_prob(batch)
    return _copy(batch).union(output), metrics


def values(batch: DataProto, critic: CriticGroup) -> tuple[DataProto, Metrics]:
    """The critic's value estimates."""
    metrics: Metrics = {}
    with timed("values", metrics):
        output = critic.compute_values(batch)
    return _copy(batch).union(output), metrics


# ---------------------------------------------------------------------------- advantages (driver)
def advantage(
    batch: DataProto, settings: StepSettings, kl_ctrl: KLController | None, global_steps: int
) -> tuple[DataProto, Metrics]:
    """token_level_rewards (scores − β·KL when the KL is in the reward; ``kl_ctrl`` then adapts β), then the
    estimator's advantages and returns."""
    algo = settings.algorithm
    batch = _copy(batch)
    metrics: Metrics = {}
    with timed("adv", metrics):
        if algo.use_kl_in_reward:
            batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=kl_ctrl, kl_penalty=algo.kl_penalty)
            metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        batch, correction_metrics = rollout_correction(batch, settings.rollout_correction)
        metrics.update(correction_metrics)
        # PF-PPO resamples rows: draw from a stream fixed by (data.seed, step), so runs and resumes repeat
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(settings.data_seed * _SEED_STRIDE + global_steps)
            batch = compute_advantage(
                batch, adv_estimator=algo.adv_estimator, gamma=algo.gamma, lam=algo.lam,
                num_repeat=settings.rollout_n, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, config=algo,
            )
        metrics.update(gdpo_reward_metrics(batch, algo))
    return batch, metrics


def rollout_correction(batch: DataProto, params: RolloutCorrectionParams) -> tuple[DataProto, Metrics]:
    """Decoupled rollout correction (verl 0.9), from ``old_log_probs`` vs ``rollout_log_probs``.

    With a mode on: ``rollout_is_weights`` (when ``rollout_is``) and the rejection-reduced ``response_mask``
    (when ``rollout_rs``). With the modes off: only the ``rollout_corr/*`` metrics, the batch unchanged. Nothing
    without rollout log-probs, in bypass mode (the actor corrects per micro-batch) or without old log-probs.
    """
    keys = batch.batch.keys()
    if params.bypass_mode or "rollout_log_probs" not in keys or "old_log_probs" not in keys:
        return batch, {}
    response_mask = batch.batch["response_mask"]
    if not params.corrects and not response_mask.any():
        return batch, {}
    correction = compute_rollout_correction(
        batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], response_mask, params
    )
    if not params.corrects:
        return batch, correction.metrics
    batch = _copy(batch)
    batch.batch["response_mask"] = correction.response_mask
    if correction.weights is not None:
        batch.batch["rollout_is_weights"] = correction.weights
    return batch, correction.metrics


# ---------------------------------------------------------------------------- updates
def update_critic(batch: DataProto, critic: CriticGroup) -> tuple[DataProto, Metrics]:
    """One critic update on the batch; returns the batch unchanged and the update's metrics."""
    metrics: Metrics = {}
    with timed("update_critic", metrics):
        output = critic.update_critic(batch)
    metrics.update(reduce_metrics(output.meta_info["metrics"]))
    return batch, metrics


def update_actor(
    batch: DataProto, actor_rollout: ActorRolloutGroup, settings: StepSettings
) -> tuple[DataProto, Metrics]:
    """One actor (PPO) update on the batch, at the rollout temperature; returns the batch and the metrics."""
    metrics: Metrics = {}
    sent = batch
    if settings.rollout_correction.bypass_mode:  # the actor computes the correction per micro-batch
        sent = _copy(batch)
        sent.meta_info["rollout_correction"] = settings.rollout_correction
    with timed("update_actor", metrics):  # the actor divides logits by the temperature it was built with
        output = actor_rollout.update_actor(sent)
    metrics.update(reduce_metrics(output.meta_info["metrics"]))
    return batch, metrics
