"""The batch plan as a text table (printed by main_ppo at start-up and by ``hybridrl-plan``)."""

from __future__ import annotations

from hybridrl.config.batch_plan import BatchPlan, RolePlan

_UNSET = "-"


def _fmt(value: object) -> str:
    return _UNSET if value is None else str(value)


def _replica(role: RolePlan) -> str:
    """What one model replica spans: Ulysses sp (FSDP) or megatron-core's TP·PP·CP."""
    if role.megatron_model_parallel is None:
        return f"sp {role.sp_size}"
    return f"TP·PP·CP {role.megatron_model_parallel}"


def _role_rows(role: RolePlan, plan: BatchPlan) -> list[tuple[str, str, str]]:
    r = role.name
    micro = "dynamic" if role.token_budget_per_rank is not None else _fmt(role.micro_batch_per_rank)
    accum = "dynamic" if role.token_budget_per_rank is not None else _fmt(role.grad_accum_steps)
    rows = [
        (f"{r}: data-parallel ranks (dp)", str(role.dp_size), f"world {plan.world_size} / {_replica(role)}"),
        (f"{r}: mini-batch (prompts, global)", str(role.mini_batch_prompts), "ppo_mini_batch_size"),
        (f"{r}: mini-batch (samples, global)", str(role.mini_batch_samples), f"{role.mini_batch_prompts} x n"),
        (
            f"{r}: mini-batch per rank (samples)",
            str(role.mini_batch_samples_per_rank),
            f"{role.mini_batch_samples} / dp {role.dp_size}",
        ),
        (f"{r}: mini-batches per step", str(role.mini_batches_per_step), "per PPO epoch, one optimizer step each"),
        (f"{r}: micro-batch per rank (samples)", micro, "ppo_micro_batch_size_per_gpu"),
        (f"{r}: grad-accum steps per mini-batch", accum, "mini-batch per rank / micro-batch"),
        (
            f"{r}: optimizer steps per step",
            str(role.optimizer_steps_per_step),
            f"{role.mini_batches_per_step} x ppo_epochs {role.ppo_epochs}",
        ),
    ]
    if role.token_budget_per_rank is not None:
        rows.append(
            (f"{r}: token budget per micro-batch", str(role.token_budget_per_rank), "ppo_max_token_len_per_gpu")
        )
    if plan.steps_per_epoch is not None:
        rows.append(
            (
                f"{r}: optimizer steps per epoch",
                _fmt(plan.optimizer_steps(role, plan.steps_per_epoch)),
                "steps per epoch x per step",
            )
        )
        rows.append(
            (
                f"{r}: optimizer steps in total",
                _fmt(plan.optimizer_steps(role, plan.total_steps)),
                "total steps x per step",
            )
        )
    return rows


def plan_rows(plan: BatchPlan) -> list[tuple[str, str, str]]:
    """(quantity, value, how it is obtained) rows of the plan, in print order."""
    rows = [
        ("prompts per step", str(plan.prompts_per_step), "data.train_batch_size"),
        ("prompts per generation batch", str(plan.prompts_per_generation_batch), "data.gen_batch_size"),
        ("responses per prompt (n)", str(plan.responses_per_prompt), "actor_rollout_ref.rollout.n"),
        ("samples per step", str(plan.samples_per_step), f"{plan.prompts_per_step} x {plan.responses_per_prompt}"),
        ("world size (ranks)", str(plan.world_size), "trainer.nnodes x trainer.n_gpus_per_node"),
        (
            "samples per rank per step",
            str(plan.samples_per_rank_per_step),
            f"{plan.samples_per_step} / dp {plan.actor.dp_size}",
        ),
        (
            "old-log-prob micro-batch per rank",
            _fmt(plan.old_log_prob_micro_batch_per_rank),
            "rollout.log_prob_micro_batch_size_per_gpu",
        ),
        (
            "ref-log-prob micro-batch per rank",
            _fmt(plan.ref_log_prob_micro_batch_per_rank) if plan.uses_reference_policy else "no ref",
            "ref.log_prob_micro_batch_size_per_gpu",
        ),
    ]
    rows += _role_rows(plan.actor, plan)
    rows += _role_rows(plan.critic, plan) if plan.critic else [("critic", "none", "no critic for this estimator")]
    if plan.dataset_len is not None:
        rows += [
            ("dataset rows", str(plan.dataset_len), "after overlong-prompt filtering"),
            (
                "steps per epoch",
                _fmt(plan.steps_per_epoch),
                f"{plan.dataset_len} // {plan.prompts_per_generation_batch} (drop_last)",
            ),
            (
                "total steps",
                _fmt(plan.total_steps),
                f"trainer.total_training_steps or steps per epoch x {plan.total_epochs} epochs",
            ),
        ]
    else:
        rows.append(("steps per epoch / total steps", "?", "known once the dataset is loaded (--dataset-len N)"))
    return rows


def format_batch_plan(plan: BatchPlan) -> str:
    """The plan as an aligned text table."""
    rows = plan_rows(plan)
    width_q = max(len(q) for q, _, _ in rows)
    width_v = max(len(v) for _, v, _ in rows)
    lines = ["Batch plan (per training step unless noted; a sample = one prompt + one response)"]
    lines += [f"  {q:<{width_q}}  {v:>{width_v}}  {how}" for q, v, how in rows]
    lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines)
