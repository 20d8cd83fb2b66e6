"""Batch-size checks of verl 0.5 (``RayPPOTrainer._validate_config`` and the workers' asserts).

Every check appends a ConfigProblem naming the key and a concrete fix; nothing raises here.
"""

from __future__ import annotations

from math import gcd

from omegaconf import DictConfig

from hybridrl.config.access import (
    ACTOR,
    REF,
    ROLLOUT,
    get,
    next_multiple,
    positive_int,
    role_world_size,
    uses_megatron,
    world_size,
)
from hybridrl.config.batch_plan import RolePlan, compute_batch_plan
from hybridrl.config.errors import ConfigProblem, warn_once


def check_batch_sizes(config: DictConfig, use_reference_policy: bool, use_critic: bool) -> list[ConfigProblem]:
    """All batch-size problems of a PPO config."""
    problems: list[ConfigProblem] = []
    train_bsz = positive_int(config, "data.train_batch_size", problems)
    n = positive_int(config, f"{ROLLOUT}.n", problems)
    world = world_size(config)
    if world is None:
        positive_int(config, "trainer.nnodes", problems)
        positive_int(config, "trainer.n_gpus_per_node", problems)
    if train_bsz is None or n is None or world is None:
        return problems
    _check_total(train_bsz, n, world, problems)
    _check_tensor_parallel(config, world, problems)
    _check_sequence_parallel_needs_packing(config, problems)
    _check_shared_prefix_layout(config, problems)
    actor_dynamic = bool(get(config, f"{ACTOR}.use_dynamic_bsz"))
    if not actor_dynamic:
        _check_exclusive(config, ACTOR, "ppo_micro_batch_size", problems)
        _check_exclusive(config, ROLLOUT, "log_prob_micro_batch_size", problems)
        if use_reference_policy:
            _check_exclusive(config, REF, "log_prob_micro_batch_size", problems)
    _check_role(config, ACTOR, train_bsz, world, actor_dynamic, problems)
    if use_critic:
        critic_dynamic = bool(get(config, "critic.use_dynamic_bsz"))
        if not critic_dynamic:
            _check_exclusive(config, "critic", "ppo_micro_batch_size", problems)
        critic_world = _own_pool_world(config, "critic", problems) or world
        _check_role(config, "critic", train_bsz, critic_world, critic_dynamic, problems)
    if get(config, "reward_model.enable"):
        _own_pool_world(config, "reward_model", problems)
        if not get(config, "reward_model.use_dynamic_bsz"):
            _check_exclusive(config, "reward_model", "micro_batch_size", problems)
    return problems


def _own_pool_world(config: DictConfig, section: str, problems: list[ConfigProblem]) -> int | None:
    """Size of ``section``'s own pool when ``<section>.enable_resource_pool``; None (and a problem) when unsized."""
    if not get(config, f"{section}.enable_resource_pool"):
        return None
    world = role_world_size(config, section)
    if world is None:
        for key in (f"{section}.nnodes", f"{section}.n_gpus_per_node"):
            if positive_int(config, key, []) is None:
                problems.append(
                    ConfigProblem(
                        key,
                        f"{section}.enable_resource_pool=True needs a pool size, got {key}={get(config, key)!r}.",
                        f"set {key}=<int >= 1>, e.g. {key}=1.",
                    )
                )
    return world


def _check_total(train_bsz: int, n: int, world: int, problems: list[ConfigProblem]) -> None:
    """train_batch_size * n samples must split evenly over all ranks (verl: real_train_batch_size)."""
    if (train_bsz * n) % world == 0:
        return
    step = world // gcd(world, n)
    problems.append(
        ConfigProblem(
            "data.train_batch_size",
            f"data.train_batch_size * actor_rollout_ref.rollout.n = {train_bsz} * {n} = {train_bsz * n} samples "
            f"per step do not split evenly over {world} ranks (trainer.nnodes * trainer.n_gpus_per_node).",
            f"set data.train_batch_size to a multiple of {step}, e.g. data.train_batch_size="
            f"{next_multiple(train_bsz, step)}, or change trainer.n_gpus_per_node.",
        )
    )


def _check_tensor_parallel(config: DictConfig, world: int, problems: list[ConfigProblem]) -> None:
    """The rollout's tensor-parallel degree must divide the world size (verl's _build_rollout assert)."""
    key = f"{ROLLOUT}.tensor_model_parallel_size"
    tp = positive_int(config, key, problems)
    if tp is not None and world % tp != 0:
        problems.append(
            ConfigProblem(
                key, f"{tp} does not divide the {world} ranks.", f"set {key} to a divisor of {world}, e.g. {key}=1."
            )
        )


def _check_sequence_parallel_needs_packing(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """Ulysses slices the packed ``[1, nnz]`` row: every SP role needs its ``use_remove_padding`` (as verl asserts)."""
    owners = (
        (f"{ACTOR}.ulysses_sequence_parallel_size", "actor_rollout_ref.model.use_remove_padding"),
        (f"{REF}.ulysses_sequence_parallel_size", "actor_rollout_ref.model.use_remove_padding"),
        ("critic.ulysses_sequence_parallel_size", "critic.model.use_remove_padding"),
        ("reward_model.ulysses_sequence_parallel_size", "reward_model.model.use_remove_padding"),
    )
    for key, packing_key in owners:
        if int(get(config, key) or 1) > 1 and not get(config, packing_key):
            problems.append(
                ConfigProblem(
                    key,
                    f"sequence parallelism ({key}={get(config, key)}) runs on packed sequences only.",
                    f"set {packing_key}=True (or the size to 1).",
                )
            )


def _check_shared_prefix_layout(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """``model.share_prompt_prefix`` hands each prompt's KV cache to its rows: the padded layout only."""
    key, packing_key = "actor_rollout_ref.model.share_prompt_prefix", "actor_rollout_ref.model.use_remove_padding"
    if get(config, key) and get(config, packing_key):
        problems.append(
            ConfigProblem(
                key,
                f"{key}=True runs on padded micro-batches, but {packing_key}=True packs them.",
                f"set {packing_key}=False (the shared prompt already skips the prompt's repeats), or {key}=False.",
            )
        )


def _check_exclusive(config: DictConfig, section: str, param: str, problems: list[ConfigProblem]) -> None:
    """Exactly one of ``<param>`` (deprecated, global) and ``<param>_per_gpu`` must be set."""
    global_key, per_gpu_key = f"{section}.{param}", f"{section}.{param}_per_gpu"
    global_value, per_gpu_value = get(config, global_key), get(config, per_gpu_key)
    if global_value is None and per_gpu_value is None:
        problems.append(
            ConfigProblem(
                per_gpu_key,
                f"neither {global_key} nor {per_gpu_key} is set.",
                f"set {per_gpu_key}=<samples per forward per rank>, e.g. {per_gpu_key}=4.",
            )
        )
    elif global_value is not None and per_gpu_value is not None:
        problems.append(
            ConfigProblem(
                global_key,
                f"both {global_key} and {per_gpu_key} are set; they are mutually exclusive.",
                f"remove {global_key} (deprecated) and keep {per_gpu_key}.",
            )
        )
    elif global_value is not None:
        warn_once(f"{global_key} is deprecated; use {per_gpu_key} (per rank) instead.")


def _check_role(
    config: DictConfig, section: str, train_bsz: int, world: int, dynamic: bool, problems: list[ConfigProblem]
) -> None:
    """Mini-batch and micro-batch checks of the actor or the critic, on the batch plan's per-rank numbers."""
    mini_key = f"{section}.ppo_mini_batch_size"
    mini = positive_int(config, mini_key, problems)
    sp = 1 if uses_megatron(config, section) else (  # Megatron's TP·PP·CP: checks_megatron
        positive_int(config, f"{section}.ulysses_sequence_parallel_size", problems) or 1)
    if mini is None:
        return
    if world % sp != 0:
        problems.append(
            ConfigProblem(
                f"{section}.ulysses_sequence_parallel_size", f"{sp} does not divide the {world} ranks.", "use 1."
            )
        )
        return
    role = _role_of(config, section)
    if role is None:
        return
    if not dynamic and train_bsz < mini:
        problems.append(
            ConfigProblem(
                mini_key,
                f"{mini_key}={mini} prompts is larger than data.train_batch_size={train_bsz}.",
                f"set {mini_key} <= {train_bsz}, e.g. {mini_key}={train_bsz}.",
            )
        )
    if role.mini_batch_samples % role.dp_size != 0:
        n = role.mini_batch_samples // mini
        step = role.dp_size // gcd(role.dp_size, n)
        problems.append(
            ConfigProblem(
                mini_key,
                f"{mini_key} * rollout.n = {mini} * {n} = {role.mini_batch_samples} samples do not split over "
                f"{role.dp_size} data-parallel ranks.",
                f"set {mini_key} to a multiple of {step}, e.g. {mini_key}={next_multiple(mini, step)}.",
            )
        )
        return
    if train_bsz >= mini and train_bsz % mini != 0:
        problems.append(_ragged_mini_batch_problem(mini_key, train_bsz, mini, role.mini_batch_samples // mini))
    if not dynamic:
        _check_micro(config, section, role, world, problems)


def _ragged_mini_batch_problem(mini_key: str, train_bsz: int, mini: int, n: int) -> ConfigProblem:
    """``data.train_batch_size`` not a multiple of the mini-batch: every step would end on a smaller remainder.

    Both sides are prompts; with ``rollout.n`` each becomes ``n`` times as many samples, so divisibility in prompts
    is divisibility in samples.
    """
    divisor = max(d for d in range(1, mini + 1) if train_bsz % d == 0)
    return ConfigProblem(
        mini_key,
        f"data.train_batch_size={train_bsz} is not a multiple of {mini_key}={mini} (with rollout.n={n}: "
        f"{train_bsz * n} samples into mini-batches of {mini * n}); the last mini-batch of every step would be a "
        f"smaller remainder of {train_bsz % mini * n} samples.",
        f"set {mini_key} to a divisor of {train_bsz}, e.g. {mini_key}={divisor}, or change data.train_batch_size.",
    )


def _role_of(config: DictConfig, section: str) -> RolePlan | None:
    """The plan's numbers of ``section`` (None when the plan cannot be computed; other checks report why)."""
    try:
        plan = compute_batch_plan(config)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return plan.actor if section == ACTOR else plan.critic


def _check_micro(config: DictConfig, section: str, role: RolePlan, world: int, problems: list[ConfigProblem]) -> None:
    """Micro-batches must divide the per-rank mini-batch (verl's worker asserts)."""
    global_key, per_gpu_key = f"{section}.ppo_micro_batch_size", f"{section}.ppo_micro_batch_size_per_gpu"
    mini, mini_per_rank = role.mini_batch_prompts, role.mini_batch_samples_per_rank
    if get(config, global_key) is not None and get(config, per_gpu_key) is None:
        micro = positive_int(config, global_key, problems)
        if micro is not None and mini % micro != 0:
            problems.append(
                ConfigProblem(
                    global_key,
                    f"{mini} (ppo_mini_batch_size) is not divisible by {micro}.",
                    f"use {per_gpu_key} instead.",
                )
            )
        if micro is not None and micro * role.sp_size < world:
            problems.append(
                ConfigProblem(
                    global_key,
                    f"{micro} * sp {role.sp_size} is smaller than the {world} ranks.",
                    f"use {per_gpu_key} instead.",
                )
            )
        return
    micro = positive_int(config, per_gpu_key, problems, allow_none=True)
    if micro is not None and mini_per_rank % micro != 0:
        divisors = [d for d in range(1, mini_per_rank + 1) if mini_per_rank % d == 0 and d <= micro]
        problems.append(
            ConfigProblem(
                per_gpu_key,
                f"the mini-batch per rank ({mini_per_rank} samples) is not divisible by {per_gpu_key}={micro}.",
                f"set {per_gpu_key} to a divisor of {mini_per_rank}, e.g. {per_gpu_key}={divisors[-1]}.",
            )
        )
