"""Data-parallel PPO actor: log-probs and the PPO update of one rank (verl 0.5 ``dp_actor``).

Each rank holds ``ppo_mini_batch_size`` samples per mini-batch (already normalised per rank by the
worker). One call of :meth:`DataParallelPPOActor.update_policy` runs::

    for epoch in ppo_epochs:
        for mini_batch in data.split(ppo_mini_batch_size):          # one optimizer step each
            info = N, G, D of the mini-batch over all ranks            # one all-reduce (global_batch.py)
            for micro_batch in mini_batch (fixed size or token budget):
                loss = policy_loss(micro, info) ; loss.backward()   # gradient accumulation
            clip_grad_and_step(grad_clip)

    policy_loss = pg_loss − entropy_coeff · agg(entropy) + kl_loss_coef · agg(kl(logp, ref_logp))
                  (+ router_aux_loss_coef · aux_loss for an MoE model with use_router_aux_loss: ``moe.py``)
                  (on-policy distillation, ``meta_info["distillation"]``: + c · L_distill, or L_distill alone
                  without task rewards: ``distillation.py``)
    pg_loss     = the pure loss of ``policy_loss.loss_mode`` (``hybridrl.algos.policy_losses``), its
                  hyper-parameters bound once at construction (``hybridrl.algos.policy_loss_modes``);
                  rollout correction (verl 0.9): each token's loss × ``rollout_is_weights`` when the batch
                  has them (decoupled mode), or the bypass-mode loss when ``meta_info["rollout_correction"]``
                  says ``bypass_mode`` (``hybridrl.algos.rollout_correction``)
    agg         = ``agg_loss`` normalised by the mini-batch's global token count N / sequence count G, times
                  the data-parallel size D (verl 0.9): each micro-batch's loss is its share of the mini-batch
                  loss, so the summed gradient does not depend on the micro-batch split (verl 0.5 divided by
                  each micro-batch's own counts and weighted by 1 / grad_accum). A user loss returning verl
                  0.5's 4-tuple keeps 0.5's weighting (``policy_loss_modes.call_verl_style_loss``).

With FSDP, gradients are averaged across ranks by the reduce-scatter; the factor D in every loss turns the
average back into the sum over the global mini-batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo, agg_loss
from hybridrl.algos.kl import kl_penalty
from hybridrl.algos.params import policy_loss_params
from hybridrl.algos.policy_loss_modes import BoundPolicyLoss, bind_bypass_loss, resolve_policy_loss
from hybridrl.config.batch_plan import ForwardPlan, RolePlan
from hybridrl.config.worker_plan import update_split
from hybridrl.models.multimodal import CHECKED_IMAGES_METRIC, add_packed_vision_inputs
from hybridrl.models.transformers.logprob_fused import token_logprobs, token_sum_pi_squared
from hybridrl.protocol import DataProto
from hybridrl.utils.config_defaults import is_filled, section_with_defaults
from hybridrl.utils.device import get_device_name
from hybridrl.utils.py_functional import append_to_dict
from hybridrl.utils.torch_functional import (
    calculate_sum_pi_squared_from_logits,
    entropy_from_logits,
    entropy_from_logits_with_chunking,
    logprobs_from_logits,
)
from hybridrl.utils.ulysses import sp_token_budget
from hybridrl.workers.actor.base import BasePPOActor
from hybridrl.workers.actor.distillation_update import (
    DISTILLATION_META_KEY,
    TEACHER_LOG_PROBS_KEY,
    TEACHER_TOPK_IDS_KEY,
    TEACHER_TOPK_LOG_PROBS_KEY,
    add_distillation_loss,
    log_probs_at_ids,
    topk_log_probs,
)
from hybridrl.workers.actor.divergence import NonFiniteStepGuard, guarded_optimizer_step
from hybridrl.workers.actor.forward import forward_response, restore_order, split_micro_batches
from hybridrl.workers.actor.global_batch import merge_micro_batch_metrics, mini_batch_info, world_size
from hybridrl.workers.actor.knobs import activation_offload_context, compute_dtype_context, maybe_compile
from hybridrl.workers.actor.moe import ROUTED_EXPERTS_KEY, ActorMoE
from hybridrl.workers.actor.zero_advantage import (
    SKIPPED_FRACTION_METRIC,
    drop_zero_advantage_rows,
    micro_batches_to_run,
    skips_zero_advantage_rows,
)

__all__ = ["DataParallelPPOActor"]

_LOG_PROB_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]
_UPDATE_KEYS = [*_LOG_PROB_KEYS, "response_mask", "old_log_probs", "advantages"]
# rollout correction's IS weights [B, R], set by the driver in decoupled mode (absent otherwise)
_IS_WEIGHTS_KEY = "rollout_is_weights"
# meta_info key: the driver's RolloutCorrectionParams in bypass mode (absent otherwise)
ROLLOUT_CORRECTION_META_KEY = "rollout_correction"


class DataParallelPPOActor(BasePPOActor):
    """PPO actor over an HF causal LM (plain, FSDP1 or FSDP2). Without an optimizer it is a reference policy.

    Args:
        config: the ``actor_rollout_ref.actor`` section (or ``.ref`` for a reference policy).
        actor_module: the causal LM.
        actor_optimizer: its optimizer; ``None`` for a frozen reference.
        use_remove_padding: pack sequences (``actor_rollout_ref.model.use_remove_padding``); None: read
            ``config.use_remove_padding``, where verl's worker copies it (absent: off).
        enable_activation_offload: ``actor_rollout_ref.model.enable_activation_offload``; None: as above.
        share_prompt_prefix: ``actor_rollout_ref.model.share_prompt_prefix`` (padded layout: each distinct prompt
            of a micro-batch runs once); None: as above.
        update: the batch plan's per-rank sizes of the PPO update; None: the section's sizes, already per rank
            (``ppo_mini_batch_size``, ``ppo_micro_batch_size_per_gpu``, ``ppo_max_token_len_per_gpu``), as verl.
        log_prob: micro-batches of :meth:`compute_log_prob`; None: read from ``data.meta_info`` per call (verl).
        temperature: ``rollout.temperature``, the logits divisor; None: ``data.meta_info["temperature"]`` (verl).
        moe_load_balance_metrics_interval: ``rollout.moe_load_balance_metrics_interval``: every this many updates
            an MoE actor logs its expert load (0: never); MoE router aux loss and replay: ``workers/actor/moe.py``.
    """

    def __init__(
        self,
        config: Any,
        actor_module: nn.Module,
        actor_optimizer: torch.optim.Optimizer | None = None,
        use_remove_padding: bool | None = None,
        enable_activation_offload: bool | None = None,
        share_prompt_prefix: bool | None = None,
        *,
        update: RolePlan | None = None,
        log_prob: ForwardPlan | None = None,
        temperature: float | None = None,
        moe_load_balance_metrics_interval: int = 0,
    ) -> None:
        # the worker's section is filled already; one built by hand (verl's unit tests) is filled here
        path = "actor_rollout_ref.actor"
        super().__init__(config if is_filled(config, path) else section_with_defaults(config, path))
        config = self.config
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer
        if use_remove_padding is None:
            use_remove_padding = bool(config.get("use_remove_padding"))
        self.use_remove_padding = use_remove_padding
        if share_prompt_prefix is None:
            share_prompt_prefix = bool(config.get("share_prompt_prefix"))
        self.share_prompt_prefix = share_prompt_prefix
        self.device_name = get_device_name()
        self._sp_size = int(config.ulysses_sequence_parallel_size or 1)
        chunked = bool(config.entropy_from_logits_with_chunking)
        use_compile = bool(config.use_torch_compile)
        # verl compiles the plain entropy helper (dynamic shapes); the chunked one loops in Python
        self._entropy_fn = (
            entropy_from_logits_with_chunking
            if chunked
            else maybe_compile(entropy_from_logits, use_compile, self.device_name)
        )
        self._logprob_fn = maybe_compile(logprobs_from_logits, use_compile, self.device_name)
        if enable_activation_offload is None:
            enable_activation_offload = bool(config.get("enable_activation_offload"))
        self._activation_offload = enable_activation_offload
        self._temperature = temperature
        self.moe = ActorMoE(config, actor_module, moe_load_balance_metrics_interval)
        # replay maps the record onto the padded or packed forward's tokens, not onto the split prompt forward
        self.share_prompt_prefix = share_prompt_prefix and self.moe.replay_mode == "disabled"
        self._routing_captures: list | None = None  # the update's routing, when it logs expert-load metrics
        self._distillation: Any = None  # this update's DistillationLossParams (meta_info), None: no teacher
        self._log_prob_split = log_prob
        self._mini_batch_size, self._update_split = update_split(config, update)
        # resolved once; a reference policy (no optimizer) has no loss
        self._pg_loss = self._resolve_pg_loss() if actor_optimizer is not None else None
        # counts skipped (non-finite) optimizer steps; stops a diverged run (None for a reference policy)
        self.divergence_guard = (
            NonFiniteStepGuard("actor_rollout_ref.actor", config.max_consecutive_nonfinite_steps, config.optim.lr)
            if actor_optimizer is not None
            else None
        )

    def _resolve_pg_loss(self) -> BoundPolicyLoss | None:
        """``pg_loss``: the loss of ``policy_loss.loss_mode`` with the actor's hyper-parameters bound."""
        return resolve_policy_loss(self.config.policy_loss.loss_mode, self.config, self.config.loss_agg_mode)

    def _update_loss(self, meta: dict[str, Any]) -> BoundPolicyLoss:
        """This update's policy loss: bypass mode's when the driver says so (verl replaces the loss mode), else
        the loss bound at construction."""
        assert self._pg_loss is not None, "a reference actor has no policy loss"
        correction = meta.get(ROLLOUT_CORRECTION_META_KEY)
        if correction is None or not correction.bypass_mode:
            return self._pg_loss
        return bind_bypass_loss(correction, policy_loss_params(self.config, self.config.loss_agg_mode))

    def _call_temperature(self, meta: dict[str, Any]) -> float:
        """The temperature given at construction; without one, the caller's ``meta_info["temperature"]``."""
        if self._temperature is not None:
            return self._temperature
        if "temperature" not in meta:
            raise KeyError("data.meta_info['temperature'] is required when the actor was built without a temperature.")
        return meta["temperature"]

    def _log_prob_micro_batches(self, batch: Any, meta: dict[str, Any], split: ForwardPlan | None) -> tuple:
        """The log-prob pass's micro-batches: the plan's split (token budget x sp), else ``meta_info``'s (verl)."""
        split = split or self._log_prob_split
        if split is None:
            return split_micro_batches(
                batch, meta.get("micro_batch_size"), bool(meta.get("use_dynamic_bsz")), meta.get("max_token_len")
            )
        budget = sp_token_budget(split.token_budget_per_rank, self._sp_size)
        return split_micro_batches(batch, split.micro_batch_per_rank, split.use_dynamic_bsz, budget)

    # ------------------------------------------------------------------ forward

    def _forward_micro_batch(
        self, micro_batch: Any, temperature: float, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Returns ``(entropy [B, R] | None, log_probs [B, R])`` of the response tokens at ``temperature``."""
        outputs = self._forward_token_outputs(micro_batch, temperature, calculate_entropy)
        return outputs.get("entropys"), outputs["log_probs"]

    def _forward_token_outputs(
        self,
        micro_batch: Any,
        temperature: float,
        calculate_entropy: bool = False,
        calculate_sum_pi_squared: bool = False,
        topk: int = 0,
        at_topk_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Per response token at ``temperature``, each ``[B, R]``: ``log_probs``, and when asked ``entropys`` and
        ``sum_pi_squared`` (Σ_v π(v)², the optimal token baseline's input; verl 0.9), from the same logits; with
        ``topk`` the ``topk_log_probs, topk_ids [B, R, K]`` (a distillation teacher's); with ``at_topk_ids
        [B, R, K]`` the log-probs there and the model's own top-k ids, ``log_probs_at_topk, own_topk_ids [B, R, K]``
        (a distillation student's: ``workers/actor/distillation_update.py``)."""
        names = ["log_probs"] + ["entropys"] * calculate_entropy + ["sum_pi_squared"] * calculate_sum_pi_squared
        names += ["topk_log_probs", "topk_ids"] * bool(topk) + ["log_probs_at_topk", "own_topk_ids"] * (
            at_topk_ids is not None)

        def token_fn(logits: torch.Tensor, next_tokens: torch.Tensor, *topk_ids: torch.Tensor) -> list[torch.Tensor]:
            outputs = base_token_fn(logits, next_tokens)
            if topk:
                outputs += list(topk_log_probs(logits, topk, temperature))
            if topk_ids:
                outputs += list(log_probs_at_ids(logits, next_tokens, outputs[0], topk_ids[0], temperature))
            return outputs

        def base_token_fn(logits: torch.Tensor, next_tokens: torch.Tensor) -> list[torch.Tensor]:
            if not calculate_entropy and logits.device.type == "cpu":
                # fp32 log-softmax (and Σπ²) in cache-sized blocks, forward and backward: no [N, V] float32 copy
                outputs = [token_logprobs(logits, next_tokens, temperature)]
                return outputs + [token_sum_pi_squared(logits, temperature)] * calculate_sum_pi_squared
            # fp32 log-softmax under bf16 mixed precision (as verl's fused CE); not in place: logits may be a
            # view needed for backward. A no-op copy-free path for fp32 logits.
            logits = logits.float() / temperature
            outputs = [self._logprob_fn(logits, next_tokens)]
            if calculate_entropy:
                if self.config.entropy_checkpointing and torch.is_grad_enabled():
                    outputs.append(torch.utils.checkpoint.checkpoint(self._entropy_fn, logits, use_reentrant=False))
                else:
                    outputs.append(self._entropy_fn(logits))
            if calculate_sum_pi_squared:
                outputs.append(calculate_sum_pi_squared_from_logits(logits))
            return outputs

        token_inputs = () if at_topk_ids is None else (at_topk_ids,)
        with compute_dtype_context(self.device_name):
            outputs = forward_response(
                self.actor_module, micro_batch, self.use_remove_padding, token_fn, self.share_prompt_prefix,
                token_inputs=token_inputs,
            )
        return dict(zip(names, outputs, strict=True))

    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False, micro_batching: ForwardPlan | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of ``responses`` under the current weights, without gradients (verl 0.5's API).

        Micro-batches follow ``micro_batching``, else the ``log_prob`` plan given at construction, else (an
        actor built by user code without one) ``data.meta_info``'s ``micro_batch_size``, ``use_dynamic_bsz``
        and ``max_token_len``, as in verl; the temperature likewise.

        Returns:
            ``(log_probs [B, R], entropys [B, R] | None)`` in the input row order.
        """
        outputs = self.compute_token_outputs(data, calculate_entropy, micro_batching=micro_batching)
        return outputs["log_probs"], outputs.get("entropys")

    def compute_token_outputs(
        self,
        data: DataProto,
        calculate_entropy: bool = False,
        calculate_sum_pi_squared: bool = False,
        micro_batching: ForwardPlan | None = None,
        topk: int = 0,
    ) -> dict[str, torch.Tensor]:
        """:meth:`compute_log_prob`'s pass as a dict of ``[B, R]`` tensors in the input row order: ``log_probs``,
        + ``entropys`` with ``calculate_entropy``, + ``sum_pi_squared`` (Σ_v π(v)² at the same temperature, one
        micro-batch's logits at a time) with ``calculate_sum_pi_squared``, + ``topk_log_probs, topk_ids
        [B, R, K]`` (the ``topk`` most likely tokens at the same temperature) with ``topk > 0``."""
        self.actor_module.eval()
        meta = data.meta_info
        temperature = self._call_temperature(meta)
        batch = data.select(batch_keys=_LOG_PROB_KEYS + _optional_keys(data, ROUTED_EXPERTS_KEY)).batch
        add_packed_vision_inputs(batch, data.non_tensor_batch, self.actor_module)
        micro_batches, order = self._log_prob_micro_batches(batch, meta, micro_batching)
        with torch.no_grad():
            outputs = self._token_outputs_of(micro_batches, temperature, calculate_entropy, calculate_sum_pi_squared,
                                             topk)
        return {name: restore_order(values, order) for name, values in outputs.items()}

    def _token_outputs_of(
        self, micro_batches: list, temperature: float, calculate_entropy: bool, calculate_sum_pi_squared: bool = False,
        topk: int = 0,
    ) -> dict[str, torch.Tensor]:
        """:meth:`_forward_token_outputs` over the micro-batches, each output concatenated in their order."""
        per_micro_batch = []
        for micro_batch in micro_batches:
            with self.moe.forward_context(micro_batch, self.use_remove_padding, training=False):
                per_micro_batch.append(
                    self._forward_token_outputs(micro_batch, temperature, calculate_entropy, calculate_sum_pi_squared,
                                                topk)
                )
        return {name: torch.cat([outputs[name] for outputs in per_micro_batch]) for name in per_micro_batch[0]}

    # ------------------------------------------------------------------ update

    def _policy_loss(
        self, micro_batch: Any, temperature: float, pg_loss_fn: BoundPolicyLoss | None = None,
        global_batch: GlobalBatchInfo = LOCAL_BATCH,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``policy_loss`` of one micro-batch, normalised by ``global_batch`` (the mini-batch's counts; the default:
        this micro-batch alone), and its metrics; ``pg_loss_fn`` defaults to the loss bound at construction."""
        pg_loss_fn = pg_loss_fn or self._pg_loss
        assert pg_loss_fn is not None, "a reference actor has no policy loss"
        config = self.config
        response_mask = micro_batch["response_mask"]
        loss_agg_mode = config.loss_agg_mode
        entropy_coeff = config.entropy_coeff
        # verl computes the entropy only when it enters the loss
        # top-k distillation: the student's log-probs at the teacher's top-k ids, from the same logits
        at_topk_ids = micro_batch[TEACHER_TOPK_IDS_KEY] if TEACHER_TOPK_IDS_KEY in micro_batch.keys() else None
        with self.moe.forward_context(micro_batch, self.use_remove_padding, training=True) as routing:
            outputs = self._forward_token_outputs(micro_batch, temperature, calculate_entropy=entropy_coeff != 0,
                                                  at_topk_ids=at_topk_ids)
        entropy, log_prob = outputs.get("entropys"), outputs["log_probs"]
        # on-policy without the old_log_prob pass (recompute_old_log_prob=False): the same weights made the samples
        old_log_prob = micro_batch["old_log_probs"] if "old_log_probs" in micro_batch.keys() else log_prob.detach()
        # rollout correction (decoupled): the driver's IS weights, passed only when present
        correction = {_IS_WEIGHTS_KEY: micro_batch[_IS_WEIGHTS_KEY]} if _IS_WEIGHTS_KEY in micro_batch.keys() else {}
        pg_loss, pg_metrics = pg_loss_fn(old_log_prob, log_prob, micro_batch["advantages"], response_mask,
                                         global_batch=global_batch, **correction)
        normalisers = global_batch.as_kwargs()
        metrics = {key: float(value) for key, value in pg_metrics.items()}
        policy_loss = pg_loss
        if entropy is not None:
            entropy_loss = agg_loss(entropy, response_mask, loss_agg_mode, **normalisers)
            policy_loss = policy_loss - entropy_coeff * entropy_loss
            metrics["actor/entropy"] = entropy_loss.detach().item()
        if config.use_kl_loss:
            kld = kl_penalty(log_prob, micro_batch["ref_log_prob"], config.kl_loss_type)
            kl_loss = agg_loss(kld, response_mask, loss_agg_mode, **normalisers)
            policy_loss = policy_loss + config.kl_loss_coef * kl_loss
            metrics["actor/kl_loss"] = kl_loss.detach().item()
            metrics["actor/kl_coef"] = float(config.kl_loss_coef)
        metrics["actor/pg_loss"] = pg_loss.detach().item()
        if self._distillation is not None:  # on-policy distillation: workers/actor/distillation_update.py
            policy_loss = add_distillation_loss(self._distillation, policy_loss, log_prob, old_log_prob, micro_batch,
                                                loss_agg_mode, global_batch, metrics, outputs)
        policy_loss = self.moe.add_aux_loss(policy_loss, metrics, routing)
        if self._routing_captures is not None:
            self._routing_captures.append(routing)
        return policy_loss, metrics

    def _optimizer_step(self) -> float:
        """Clip to ``grad_clip`` and step (skipped, grads zeroed, when the norm is not finite); the divergence
        guard raises DivergenceError after too many skips in a row or a step that blew the weights up."""
        assert self.actor_optimizer is not None and self.divergence_guard is not None
        return guarded_optimizer_step(self.divergence_guard, self.actor_module, self.actor_optimizer, self.config.grad_clip)

    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """PPO update over ``ppo_epochs`` × mini-batches × micro-batches (see the module docstring).

        ``data.batch`` needs ``responses, input_ids, attention_mask, position_ids, response_mask,
        old_log_probs, advantages`` (+ ``ref_log_prob`` with ``use_kl_loss``); ``data.meta_info`` needs
        ``temperature`` only when the actor was built without one.

        Returns:
            verl's metrics as a dict of lists: ``actor/pg_loss, actor/pg_clipfrac, actor/ppo_kl,
            actor/pg_clipfrac_lower`` (+ ``actor/kl_coef``) per micro-batch; ``actor/pg_loss`` (+ ``actor/entropy``,
            ``actor/kl_loss``) and ``actor/grad_norm`` per mini-batch (the loss terms summed over its
            micro-batches: ``global_batch.py``).
        """
        if self.actor_optimizer is None:
            raise RuntimeError("update_policy called on a reference actor (no optimizer).")
        self.actor_module.train()
        config = self.config
        temperature = self._call_temperature(data.meta_info)
        keys = _UPDATE_KEYS + (["ref_log_prob"] if config.use_kl_loss else [])
        keys += _optional_keys(data, _IS_WEIGHTS_KEY, ROUTED_EXPERTS_KEY, TEACHER_LOG_PROBS_KEY,
                               TEACHER_TOPK_LOG_PROBS_KEY, TEACHER_TOPK_IDS_KEY)
        pg_loss_fn = self._update_loss(data.meta_info)
        self._distillation = data.meta_info.get(DISTILLATION_META_KEY)
        # bypass mode's loss (not the one bound at construction) and distillation's per-token loss need every row
        skip_zero_adv = self._distillation is None and skips_zero_advantage_rows(
            config, bypass_mode=pg_loss_fn is not self._pg_loss)
        if "old_log_probs" not in data.batch.keys():
            if config.recompute_old_log_prob:
                raise KeyError(
                    "update_actor: the batch has no old_log_probs (compute_log_prob was not run); set "
                    "actor_rollout_ref.actor.recompute_old_log_prob=False only for on-policy updates"
                )
            keys.remove("old_log_probs")
        batch = data.select(batch_keys=keys).batch
        checked_image_samples = add_packed_vision_inputs(batch, data.non_tensor_batch, self.actor_module)
        split = self._update_split
        metrics: dict[str, list[float]] = {}
        self._routing_captures = [] if self.moe.start_update() else None
        for _ in range(config.ppo_epochs):
            for mini_batch in batch.split(self._mini_batch_size):
                micro_batches, _ = split_micro_batches(
                    mini_batch,
                    split.micro_batch_per_rank,
                    split.use_dynamic_bsz,
                    sp_token_budget(split.token_budget_per_rank, self._sp_size),
                )
                info = mini_batch_info(mini_batch["response_mask"], self._dp_size(), config.get("loss_scale_factor"))
                self.actor_optimizer.zero_grad()
                micro_metrics = self._accumulate_gradients(micro_batches, temperature, pg_loss_fn, skip_zero_adv,
                                                           info)
                for key, values in merge_micro_batch_metrics(micro_metrics, info.is_global).items():
                    metrics.setdefault(key, []).extend(values)
                append_to_dict(metrics, {"actor/grad_norm": self._optimizer_step()})
        self.actor_optimizer.zero_grad()
        if checked_image_samples:  # the rollout/training image check (hybridrl/models/image_fingerprint.py)
            metrics[CHECKED_IMAGES_METRIC] = [float(checked_image_samples)]
        if self._routing_captures is not None:
            append_to_dict(metrics, self.moe.load_metrics(self._routing_captures))
            self._routing_captures = None
        return metrics

    def _dp_size(self) -> int:
        """Data-parallel ranks: the world over the Ulysses SP degree (the SP ranks of a group share their data)."""
        return world_size() // self._sp_size

    def _accumulate_gradients(self, micro_batches: list, temperature: float, pg_loss_fn: BoundPolicyLoss,
                              skip_zero_adv: bool = False,
                              global_batch: GlobalBatchInfo = LOCAL_BATCH) -> list[dict[str, float]]:
        """Forward and backward of a mini-batch's micro-batches (gradients accumulate); their metrics.

        Each loss is normalised by ``global_batch`` (the whole mini-batch's counts), so it is backpropagated as
        it is. With ``skip_zero_adv`` the rows whose advantages are all 0 stay out of the forward and backward
        (their loss terms are 0 and the denominators are global) and a micro-batch with no other row on any rank
        does not run (except the first) (``zero_advantage.py``: the same gradient)."""
        plans = [drop_zero_advantage_rows(micro_batch) if skip_zero_adv else (micro_batch, None)
                 for micro_batch in micro_batches]
        runs = (micro_batches_to_run([skipped is None or skipped.kept_rows > 0 for _, skipped in plans])
                if skip_zero_adv else [True] * len(plans))
        all_metrics = []
        for (micro_batch, skipped), run in zip(plans, runs):
            if not run:  # no row counts here nor on any rank: its loss and gradient are 0
                assert skipped is not None
                all_metrics.append(skipped.metrics_without_rows())
                continue
            with activation_offload_context(self._activation_offload, self.device_name):
                policy_loss, micro_metrics = self._policy_loss(micro_batch, temperature, pg_loss_fn, global_batch)
            if skipped is not None:
                micro_metrics = skipped.rescale_metrics(micro_metrics)
            elif skip_zero_adv:
                micro_metrics[SKIPPED_FRACTION_METRIC] = 0.0
            policy_loss.backward()
            all_metrics.append(micro_metrics)
        return all_metrics


def _optional_keys(data: DataProto, *keys: str) -> list[str]:
    """Those of ``keys`` the batch holds (inputs the driver adds only in some configurations)."""
    return [key for key in keys if key in data.batch.keys()]
