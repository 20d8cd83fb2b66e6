"""The batch plan: every batch quantity of a PPO run, resolved from the config (verl's semantics).

Notation (all counts; "prompt" = one dataset row, "sample" = one prompt + one response):
    B  = data.train_batch_size            prompts per step (global)
    n  = actor_rollout_ref.rollout.n      responses per prompt
    W  = trainer.nnodes * trainer.n_gpus_per_node     ranks
    sp = ulysses_sequence_parallel_size, dp = W / sp   data-parallel ranks (FSDP)
    mp = TP * PP * CP of <role>.megatron, dp = W / mp  data-parallel ranks (strategy=megatron: a TP/PP/CP group
                                                       shares one slice of the batch, as in verl's Megatron workers)
    M  = ppo_mini_batch_size              prompts per mini-batch (global)
    m  = ppo_micro_batch_size_per_gpu     samples per forward/backward per rank

    samples per step            = B * n
    samples per rank per step   = B * n / dp
    mini-batch per rank         = M * n / dp         (one optimizer step each)
    mini-batches per step       = ceil((B * n / dp) / (M * n / dp))   per PPO epoch
    gradient accumulation       = (M * n / dp) / m   (dynamic when use_dynamic_bsz)
    optimizer steps per step    = mini-batches per step * ppo_epochs
    steps per epoch             = floor(dataset rows / data.gen_batch_size)   (drop_last=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from hybridrl.config.access import (
    ACTOR,
    REF,
    ROLLOUT,
    get,
    need_critic,
    need_reference_policy,
    replica_size,
    role_world_size,
    uses_megatron,
    world_size,
)


@dataclass(frozen=True)
class ForwardPlan:
    """How one rank splits its batch into micro-batches for a forward pass (samples, or tokens when dynamic)."""

    micro_batch_per_rank: int | None  # samples per micro-batch; None with use_dynamic_bsz (or when unset)
    token_budget_per_rank: int | None  # tokens per micro-batch per rank, use_dynamic_bsz only (x sp in an SP group)

    @property
    def use_dynamic_bsz(self) -> bool:
        return self.token_budget_per_rank is not None

    def require(self, key: str) -> ForwardPlan:
        """``self``; raises ValueError naming ``key`` when neither a micro-batch size nor a token budget is set."""
        if self.micro_batch_per_rank is None and not self.use_dynamic_bsz:
            raise ValueError(f"{key} is not set; set it (samples per GPU per forward) or use_dynamic_bsz=True.")
        return self


@dataclass(frozen=True)
class RolePlan:
    """Batch numbers of one trained model (actor or critic); None = not determined by the config."""

    name: str
    dp_size: int
    sp_size: int
    mini_batch_prompts: int
    mini_batch_samples: int  # global: M * n
    mini_batch_samples_per_rank: int  # M * n / dp
    mini_batches_per_step: int  # per PPO epoch
    ppo_epochs: int
    optimizer_steps_per_step: int
    micro_batch_per_rank: int | None  # None with use_dynamic_bsz or when unset
    grad_accum_steps: int | None
    token_budget_per_rank: int | None  # use_dynamic_bsz only
    megatron_model_parallel: int | None = None  # TP * PP * CP with strategy=megatron (dp = world / it); None: FSDP

    @property
    def micro_batching(self) -> ForwardPlan:
        """The update's micro-batches as a :class:`ForwardPlan`."""
        return ForwardPlan(self.micro_batch_per_rank, self.token_budget_per_rank)


@dataclass(frozen=True)
class PolicyWorkerPlan:
    """What an ``ActorRolloutRefWorker`` needs: the actor's update, the two log-prob passes, the LR horizon."""

    actor: RolePlan
    old_log_prob: ForwardPlan  # actor_rollout_ref.rollout.log_prob_*
    ref_log_prob: ForwardPlan  # actor_rollout_ref.ref.log_prob_*
    total_training_steps: int  # the LR schedule's horizon (optim.total_training_steps when not known)


@dataclass(frozen=True)
class CriticWorkerPlan:
    """What a ``CriticWorker`` needs: its update, its value forward, the LR horizon."""

    critic: RolePlan
    values: ForwardPlan  # critic.forward_micro_batch_size_per_gpu / forward_max_token_len_per_gpu
    total_training_steps: int


@dataclass(frozen=True)
class BatchPlan:
    """Every batch quantity of a run. Epoch/total fields need the dataset length (None otherwise)."""

    prompts_per_step: int
    prompts_per_generation_batch: int
    responses_per_prompt: int
    samples_per_step: int
    world_size: int
    samples_per_rank_per_step: int
    actor: RolePlan
    critic: RolePlan | None
    old_log_prob: ForwardPlan
    ref_log_prob: ForwardPlan
    critic_values: ForwardPlan | None
    reward_model: ForwardPlan  # reward_model.micro_batch_size_per_gpu / forward_max_token_len_per_gpu
    uses_reference_policy: bool
    actor_lr_horizon: int  # actor_rollout_ref.actor.optim.total_training_steps (used until total_steps is known)
    critic_lr_horizon: int
    dataset_len: int | None = None
    steps_per_epoch: int | None = None
    total_epochs: int | None = None
    total_steps: int | None = None
    notes: list[str] = field(default_factory=list)

    def optimizer_steps(self, role: RolePlan, steps: int | None) -> int | None:
        """Optimizer steps of ``role`` over ``steps`` training steps."""
        return None if steps is None else steps * role.optimizer_steps_per_step

    @property
    def old_log_prob_micro_batch_per_rank(self) -> int | None:
        return self.old_log_prob.micro_batch_per_rank

    @property
    def ref_log_prob_micro_batch_per_rank(self) -> int | None:
        """None also when no reference policy."""
        return self.ref_log_prob.micro_batch_per_rank if self.uses_reference_policy else None

    def policy_worker_plan(self) -> PolicyWorkerPlan:
        """The frozen plan handed to each ``ActorRolloutRefWorker``."""
        horizon = self.total_steps if self.total_steps is not None else self.actor_lr_horizon
        return PolicyWorkerPlan(self.actor, self.old_log_prob, self.ref_log_prob, horizon)

    def critic_worker_plan(self) -> CriticWorkerPlan:
        """The frozen plan handed to each ``CriticWorker`` (needs a critic in the plan)."""
        assert self.critic is not None and self.critic_values is not None, "the config uses no critic"
        horizon = self.total_steps if self.total_steps is not None else self.critic_lr_horizon
        return CriticWorkerPlan(self.critic, self.critic_values, horizon)


def compute_batch_plan(config: DictConfig, dataset_len: int | None = None) -> BatchPlan:
    """Resolve the plan. Assumes validation passed; tolerates bad values by flooring/ceiling."""
    prompts = int(get(config, "data.train_batch_size"))
    n = int(get(config, f"{ROLLOUT}.n"))
    world = world_size(config) or 1
    actor = _role_plan(config, ACTOR, "actor", prompts, n, world)
    critic_world = role_world_size(config, "critic") or world  # its own pool under split placement
    critic_n = int(get(config, "critic.rollout_n") or n)
    critic = _role_plan(config, "critic", "critic", prompts, critic_n, critic_world) if need_critic(config) else None
    use_ref = need_reference_policy(config)
    gen_batch = int(get(config, "data.gen_batch_size") or prompts)
    rm_dp = max(1, (role_world_size(config, "reward_model") or world) // replica_size(config, "reward_model"))
    plan = BatchPlan(
        prompts_per_step=prompts,
        prompts_per_generation_batch=gen_batch,
        responses_per_prompt=n,
        samples_per_step=prompts * n,
        world_size=world,
        samples_per_rank_per_step=prompts * n // actor.dp_size,
        actor=actor,
        critic=critic,
        old_log_prob=_log_prob_forward(config, ROLLOUT, actor.dp_size),
        ref_log_prob=_log_prob_forward(config, REF, actor.dp_size),
        critic_values=_values_forward(config, critic) if critic is not None else None,
        reward_model=_forward(config, "reward_model", "micro_batch_size", "forward_max_token_len_per_gpu", rm_dp),
        uses_reference_policy=use_ref,
        actor_lr_horizon=int(get(config, f"{ACTOR}.optim.total_training_steps") or -1),
        critic_lr_horizon=int(get(config, "critic.optim.total_training_steps") or -1),
        notes=_notes(config, prompts, gen_batch),
    )
    return with_dataset_len(plan, config, dataset_len) if dataset_len is not None else plan


def with_dataset_len(plan: BatchPlan, config: DictConfig, dataset_len: int) -> BatchPlan:
    """Fill the per-epoch and total quantities once the (filtered) dataset length is known."""
    from dataclasses import replace

    steps_per_epoch = dataset_len // plan.prompts_per_generation_batch
    epochs = int(get(config, "trainer.total_epochs"))
    total = get(config, "trainer.total_training_steps")
    total_steps = int(total) if total is not None else steps_per_epoch * epochs
    return replace(
        plan, dataset_len=dataset_len, steps_per_epoch=steps_per_epoch, total_epochs=epochs, total_steps=total_steps
    )


def _sp(config: DictConfig, section: str) -> int:
    return int(get(config, f"{section}.ulysses_sequence_parallel_size") or 1)


def _role_plan(config: DictConfig, section: str, name: str, prompts: int, n: int, world: int) -> RolePlan:
    megatron = uses_megatron(config, section)
    sp = 1 if megatron else _sp(config, section)  # Megatron shards sequences with its own CP, not Ulysses
    dp = max(1, world // replica_size(config, section))
    mini = int(get(config, f"{section}.ppo_mini_batch_size"))
    mini_per_rank = max(1, mini * n // dp)
    samples_per_rank = prompts * n // dp
    minis = -(-samples_per_rank // mini_per_rank)  # the last mini-batch is smaller when M does not divide B
    epochs = int(get(config, f"{section}.ppo_epochs"))
    dynamic = bool(get(config, f"{section}.use_dynamic_bsz"))
    micro = None if dynamic else _micro_per_rank(config, section, "ppo_micro_batch_size", dp)
    return RolePlan(
        name=name,
        dp_size=dp,
        sp_size=sp,
        mini_batch_prompts=mini,
        mini_batch_samples=mini * n,
        mini_batch_samples_per_rank=mini_per_rank,
        mini_batches_per_step=minis,
        ppo_epochs=epochs,
        optimizer_steps_per_step=minis * epochs,
        micro_batch_per_rank=micro,
        grad_accum_steps=None if micro is None else max(1, mini_per_rank // micro),
        token_budget_per_rank=int(get(config, f"{section}.ppo_max_token_len_per_gpu")) if dynamic else None,
        megatron_model_parallel=replica_size(config, section) if megatron else None,
    )


def _micro_per_rank(config: DictConfig, section: str, param: str, dp: int) -> int | None:
    """The per-rank micro-batch: ``<param>_per_gpu``, else the deprecated global ``<param>`` / dp."""
    per_gpu = get(config, f"{section}.{param}_per_gpu")
    if per_gpu is not None:
        return int(per_gpu)
    global_value = get(config, f"{section}.{param}")
    return None if global_value is None else max(1, int(global_value) // dp)


def _forward(config: DictConfig, section: str, param: str, budget_key: str, dp: int) -> ForwardPlan:
    """Micro-batches of a forward pass: ``<param>_per_gpu`` (or the global ``<param>`` / dp), or a token budget."""
    dynamic_key = "log_prob_use_dynamic_bsz" if param.startswith("log_prob") else "use_dynamic_bsz"
    if get(config, f"{section}.{dynamic_key}"):
        return ForwardPlan(None, int(get(config, f"{section}.{budget_key}")))
    return ForwardPlan(_micro_per_rank(config, section, param, dp), None)


def _log_prob_forward(config: DictConfig, section: str, dp: int) -> ForwardPlan:
    return _forward(config, section, "log_prob_micro_batch_size", "log_prob_max_token_len_per_gpu", dp)


def _values_forward(config: DictConfig, critic: RolePlan) -> ForwardPlan:
    """The critic's value pass; its micro-batch falls back to the update's (verl's worker does the same)."""
    plan = _forward(config, "critic", "forward_micro_batch_size", "forward_max_token_len_per_gpu", critic.dp_size)
    if plan.use_dynamic_bsz or plan.micro_batch_per_rank is not None:
        return plan
    return ForwardPlan(critic.micro_batch_per_rank, None)


def _notes(config: DictConfig, prompts: int, gen_batch: int) -> list[str]:
    notes = []
    if get(config, "algorithm.filter_groups.enable"):
        notes.append(
            f"dynamic sampling: each generation batch has {gen_batch} prompts; batches are drawn until "
            f"{prompts} prompts survive filtering, so steps per epoch is an upper bound."
        )
    return notes
