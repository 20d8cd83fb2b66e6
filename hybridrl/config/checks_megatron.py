"""Checks of ``strategy=megatron`` runs (the ``megatron.*`` sections of ``ppo_megatron_trainer.yaml``), before Ray.

A role trains on megatron-core when its section's ``strategy`` is ``megatron``: the actor (and the reference and
rollout in its worker) by ``actor_rollout_ref.actor.strategy``, the critic by ``critic.strategy``, the reward model by
``reward_model.strategy``. For each such role in use:

    <section>.megatron exists                   the FSDP file has no megatron sections: --config-name ppo_megatron_trainer
    ranks % (TP × PP × CP) == 0                  data-parallel size = ranks / (TP × PP × CP), an integer
    virtual PP, EP = 1                          not implemented in hybridrl's Megatron workers yet (they would raise)
    use_dist_checkpointing → a path             dist_checkpointing_path names the megatron-core dist checkpoint
    CP > 1 on GPU only (warned: never run)       written for TransformerEngine attention (GPU layer spec); megatron-
                                                 core's local attention (CPU) asserts context_parallel_size == 1
    PP > 1: policy only, built-in converter,     the actor / reference run megatron-core's pipeline schedule; the
      no checkpoints                             critic, reward model, mbridge and checkpoints at PP > 1 do not yet
    critic / RM TP, PP, CP = the actor's         when colocated: megatron-core's parallel groups exist once a process
    sequence_parallel on CPU (TP > 1)            warned: megatron-core's sequence parallelism needs the GPU layer
                                                 spec; on CPU the worker builds the model without it
    a worker class exists for the role           the Megatron critic / reward model modules (imported by path)

and for the run: actor and critic on the same engine family (verl 0.5 asserts it), no server-mode rollout
(``rollout.mode=async``), no separate rollout pool (``trainer.v1.trainer_mode=separate_async``) and no LoRA with a
Megatron actor. Torch-free (``importlib.util.find_spec`` only).
"""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from hybridrl.config.access import (
    ACTOR,
    MEGATRON_REPLICA_KEYS,
    REF,
    ROLLOUT,
    get,
    replica_size,
    role_world_size,
    uses_megatron,
)
from hybridrl.config.errors import ConfigProblem, warn_once
from hybridrl.config.worker_classes import WORKER_CLASSES, worker_module_exists

__all__ = ["check_megatron", "check_megatron_environment", "megatron_sections"]

MEGATRON_CONFIG = "ppo_megatron_trainer"
# the worker kind (hybridrl.config.worker_classes) of each section's role
_WORKER_KIND = {ACTOR: "policy", "critic": "critic", "reward_model": "reward_model"}
# megatron.* keys that must keep their "off" value: (key, what counts as on, what hybridrl lacks)
_NOT_IMPLEMENTED = (
    ("virtual_pipeline_model_parallel_size", lambda v: v is not None, "the interleaved (virtual) pipeline schedule"),
    ("expert_model_parallel_size", lambda v: isinstance(v, int) and v > 1, "expert parallelism (MoE models)"),
)
_OFF_VALUE = {"virtual_pipeline_model_parallel_size": "null"}


def megatron_sections(config: DictConfig, use_critic: bool, use_reference_policy: bool) -> list[str]:
    """The sections (``actor_rollout_ref.actor``, ``.ref``, ``critic``, ``reward_model``) a run builds on megatron-core."""
    sections = []
    if uses_megatron(config, ACTOR):
        sections.append(ACTOR)
        if use_reference_policy:
            sections.append(REF)  # in the actor's worker, on the actor's layout
    if use_critic and uses_megatron(config, "critic"):
        sections.append("critic")
    if get(config, "reward_model.enable") and uses_megatron(config, "reward_model"):
        sections.append("reward_model")
    return sections


def check_megatron(config: DictConfig, use_critic: bool, use_reference_policy: bool) -> list[ConfigProblem]:
    """Every problem of the Megatron roles of a composed PPO config (none when no role uses megatron)."""
    problems: list[ConfigProblem] = []
    sections = megatron_sections(config, use_critic, use_reference_policy)
    if use_critic:
        _check_same_family(config, problems)
    for section in sections:
        if get(config, f"{section}.megatron") is None:
            problems.append(_needs_megatron_file(section))
            continue
        if section != REF:  # the reference runs on the actor's layout
            _check_divides_world(config, section, problems)
        _check_not_implemented(config, section, problems)
        _check_dist_checkpoint_path(config, section, problems)
        _check_context_parallel(config, section, problems)
        _check_pipeline(config, section, problems)
        _check_colocated_layout(config, section, problems)
        _warn_sequence_parallel_on_cpu(config, section)
        _check_worker_exists(section, problems)
    if ACTOR in sections:
        _check_policy_modes(config, problems)
    return problems


def check_megatron_environment(config: DictConfig, use_critic: bool, use_reference_policy: bool) -> list[ConfigProblem]:
    """megatron-core must be importable where a role uses it (it lives in ``.venv-megatron``)."""
    sections = megatron_sections(config, use_critic, use_reference_policy)
    if not sections or importlib.util.find_spec("megatron") is not None:
        return []
    key = f"{sections[0]}.strategy"
    return [ConfigProblem(key, "megatron is selected but megatron-core is not installed in this Python environment.",
                          "run `bash scripts/setup_megatron_env.sh` and start main_ppo with .venv-megatron/bin/python "
                          "(with rollout.name=vllm on CPU: .venv-vllm from scripts/setup_vllm_cpu_env.sh, which has "
                          f"megatron-core too, with megatron.use_mbridge=False), or set {key}=fsdp2.")]


def _needs_megatron_file(section: str) -> ConfigProblem:
    key = f"{section}.strategy" if section != REF else f"{ACTOR}.strategy"
    return ConfigProblem(key, f"strategy=megatron needs the {section}.megatron section, which ppo_trainer.yaml lacks.",
                         f"run main_ppo with `--config-name {MEGATRON_CONFIG}` (it sets strategy=megatron and every "
                         "megatron.* key), or set the strategy to fsdp2.")


def _check_same_family(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """verl 0.5's main_ppo asserts the critic's engine family is the actor's (FSDP with FSDP, Megatron with Megatron)."""
    if uses_megatron(config, ACTOR) != uses_megatron(config, "critic"):
        actor, critic = get(config, f"{ACTOR}.strategy"), get(config, "critic.strategy")
        problems.append(ConfigProblem(
            "critic.strategy", f"the critic ({critic!r}) and the actor ({actor!r}) must train on the same engine "
            "family (FSDP or Megatron), as in verl.", f"set critic.strategy={'megatron' if actor == 'megatron' else actor}."))


def _check_divides_world(config: DictConfig, section: str, problems: list[ConfigProblem]) -> None:
    world = role_world_size(config, section)
    size = replica_size(config, section)
    if world is None or world % size == 0:
        return
    sizes = " × ".join(f"{label}={get(config, f'{section}.megatron.{key}')}"
                       for label, key in zip(("TP", "PP", "CP"), MEGATRON_REPLICA_KEYS))
    key = f"{section}.megatron.tensor_model_parallel_size"
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    problems.append(ConfigProblem(
        key, f"the {world} ranks of this role do not split into model replicas of TP × PP × CP = {sizes} = {size} "
        "ranks (data-parallel size = ranks / (TP × PP × CP)).",
        f"set {key} to a divisor of {world} ({', '.join(map(str, divisors))}), or change trainer.n_gpus_per_node."))


def _check_colocated_layout(config: DictConfig, section: str, problems: list[ConfigProblem]) -> None:
    """A critic / reward model sharing the actor's processes (no pool of its own) shares megatron-core's parallel
    state, which is global to a process and made once: its TP / PP / CP must be the actor's."""
    if section in (ACTOR, REF) or get(config, f"{section}.enable_resource_pool") or not uses_megatron(config, ACTOR):
        return
    for key in MEGATRON_REPLICA_KEYS:
        own, actor = get(config, f"{section}.megatron.{key}"), get(config, f"{ACTOR}.megatron.{key}")
        if own != actor:
            problems.append(ConfigProblem(
                f"{section}.megatron.{key}", f"{own!r} differs from the actor's {actor!r}, but the {section} runs in the "
                "actor's processes, where megatron-core's parallel groups exist once.",
                f"set {section}.megatron.{key}={actor}, or give the {section} its own pool "
                f"({section}.enable_resource_pool=True)."))


def _check_not_implemented(config: DictConfig, section: str, problems: list[ConfigProblem]) -> None:
    megatron = f"{section}.megatron"
    for name, is_on, feature in _NOT_IMPLEMENTED:
        value = get(config, f"{megatron}.{name}")
        if is_on(value):
            off = _OFF_VALUE.get(name, "1")
            problems.append(ConfigProblem(f"{megatron}.{name}", f"{value!r}: {feature} is not implemented in "
                                          "hybridrl's Megatron workers yet (TP and DP are).", f"set it to {off}."))


def _check_dist_checkpoint_path(config: DictConfig, section: str, problems: list[ConfigProblem]) -> None:
    """``use_dist_checkpointing=True`` loads the initial weights from ``dist_checkpointing_path``: it must be set (the
    folder itself is checked where it is read, on the workers: :mod:`hybridrl.workers.megatron.dist_checkpoint`)."""
    megatron = f"{section}.megatron"
    if get(config, f"{megatron}.use_dist_checkpointing") is True and not get(config, f"{megatron}.dist_checkpointing_path"):
        problems.append(ConfigProblem(
            f"{megatron}.dist_checkpointing_path", "null, but use_dist_checkpointing=True loads the initial weights "
            "from a megatron-core dist checkpoint.", "write one with `python -m hybridrl.workers.megatron."
            "converter_hf_to_mcore --hf_model_path <HF folder> --output_path <folder>` and set it to that folder, "
            "or set use_dist_checkpointing=False."))


def _check_context_parallel(config: DictConfig, section: str, problems: list[ConfigProblem]) -> None:
    """CP > 1 is written for the GPU (TransformerEngine attention) and has never run; on CPU it cannot run."""
    key = f"{section}.megatron.context_parallel_size"
    cp = get(config, key)
    if not (isinstance(cp, int) and cp > 1):
        return
    if get(config, "trainer.device") == "cpu":
        problems.append(ConfigProblem(
            key, f"{cp}: context parallelism is implemented for the GPU path only (TransformerEngine layer spec, "
            "untested): megatron-core's CPU attention (the local spec's DotProductAttention) asserts "
            "context_parallel_size == 1 and takes no packed sequences.", "set it to 1 on CPU (or run on GPU)."))
        return
    warn_once(f"{key}={cp}: hybridrl's context parallelism (TransformerEngine attention, THD packed sequences, "
              "outputs all-gathered over CP) is written but has never run on a GPU; compare a step with "
              "context_parallel_size=1 before relying on it.")


def _check_pipeline(config: DictConfig, section: str, problems: list[ConfigProblem]) -> None:
    """PP > 1 runs for the policy (actor, reference, with checkpoints) with the built-in converter."""
    key = f"{section}.megatron.pipeline_model_parallel_size"
    pp = get(config, key)
    if not (isinstance(pp, int) and pp > 1):
        return
    if section not in (ACTOR, REF):
        problems.append(ConfigProblem(key, f"{pp}: pipeline parallelism is built for the policy (actor, reference) "
                                      f"only, not for the {section} yet.", "set it to 1."))
        return
    if get(config, f"{section}.megatron.use_mbridge") is True:
        problems.append(ConfigProblem(f"{section}.megatron.use_mbridge", f"True with {key}={pp}: pipeline stages load "
                                      "and export weights through the built-in converter only.", "set it to False."))


def _warn_sequence_parallel_on_cpu(config: DictConfig, section: str) -> None:
    tp = get(config, f"{section}.megatron.tensor_model_parallel_size")
    on = get(config, f"{section}.megatron.sequence_parallel") is True
    if on and isinstance(tp, int) and tp > 1 and get(config, "trainer.device") == "cpu":
        warn_once(f"{section}.megatron.sequence_parallel=True is ignored on CPU: megatron-core's sequence parallelism "
                  "needs the GPU (TransformerEngine) layer spec; the model is built without it (same results).")


def _check_worker_exists(section: str, problems: list[ConfigProblem]) -> None:
    kind = _WORKER_KIND.get(section)
    if kind is None or worker_module_exists("megatron", kind):
        return
    module = WORKER_CLASSES["megatron"][kind].split(":")[0]
    problems.append(ConfigProblem(f"{section}.strategy", f"strategy=megatron: this version of hybridrl has no Megatron "
                                  f"{kind.replace('_', ' ')} worker ({module} is missing).",
                                  f"train the actor and the {kind.replace('_', ' ')} with FSDP2 (--config-name "
                                  f"ppo_trainer), or run without a {kind.replace('_', ' ')}."))


def _check_policy_modes(config: DictConfig, problems: list[ConfigProblem]) -> None:
    """Policy-worker modes the Megatron worker does not have: server-mode rollout, a separate rollout pool, LoRA."""
    unsupported = (
        (f"{ROLLOUT}.mode", get(config, f"{ROLLOUT}.mode") == "async", "sync",
         "the server-mode rollout (agent loops) has no Megatron worker yet"),
        ("trainer.v1.trainer_mode", get(config, "trainer.v1.trainer_mode") == "separate_async", "sync",
         "the rollout on its own pool has no Megatron worker yet"),
        ("actor_rollout_ref.model.lora_rank", (get(config, "actor_rollout_ref.model.lora_rank") or 0) > 0, "0",
         "LoRA is not implemented on megatron-core"),
    )
    for key, active, fix_value, why in unsupported:
        if active:
            problems.append(ConfigProblem(key, f"{get(config, key)!r} with {ACTOR}.strategy=megatron: {why}.",
                                          f"set {key}={fix_value}, or train with --config-name ppo_trainer (FSDP2)."))
