"""On-policy distillation checks (``distillation.*``, verl 0.9), and the teachers a config names.

What runs: teachers on the hf path (an FSDP forward of each teacher, the reference policy's machinery) on their
own pool ``[distillation.n_gpus_per_node] * distillation.nnodes``, the single-sample reverse-KL losses (k1, k3,
...) supervised or as a policy-gradient reward and the top-k forward KL (``forward_kl_topk``, the teacher's
``topk`` log-probs), mixed with the task loss. Refused here, each with its key: a ``topk`` below 1 (one larger
than the vocabulary: the preflight, ``preflight_teacher``), a vllm / sglang teacher, a Megatron actor, a
supervised k1 loss (its gradient ignores the teacher, as verl refuses it) and a policy loss other than
``vanilla`` (as verl).

Teachers follow verl's ``DistillationConfig``: ``teacher_models`` holds ``teacher_model`` by default; with that
one entry alone it is the single teacher and scores every sample (key ``default``); with more entries
``teacher_model`` is dropped and each other entry needs a ``model_path`` and a distinct ``key``, the value of the
sample's ``teacher_key`` field (``data_source`` by default) it scores.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from hybridrl.config.access import ACTOR, REF, get
from hybridrl.config.errors import ConfigProblem, warn_once

__all__ = ["RUNNABLE_LOSS_MODES", "SINGLE_TEACHER_KEY", "TeacherSpec", "check_distillation", "teacher_specs"]

# the loss modes the actor computes (hybridrl.algos.distillation's ESTIMATOR_LOSS_MODES + TOPK_LOSS_MODES; a test
# keeps them equal)
RUNNABLE_LOSS_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "forward_kl_topk")
# the key of the single teacher (verl's)
SINGLE_TEACHER_KEY = "default"
_DEFAULT_ENTRY = "teacher_model"
_LOSS = "distillation.distillation_loss"


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher: its entry name under ``distillation.teacher_models``, the key it scores, its model folder."""

    name: str
    key: str
    model_path: str | None


def teacher_specs(config: DictConfig) -> list[TeacherSpec]:
    """The teachers of ``distillation.teacher_models`` as verl resolves them (module docstring)."""
    entries = dict(get(config, "distillation.teacher_models") or {})
    if len(entries) > 1:
        entries.pop(_DEFAULT_ENTRY, None)
        return [TeacherSpec(name, str(entry.get("key")), entry.get("model_path")) for name, entry in entries.items()]
    return [TeacherSpec(name, SINGLE_TEACHER_KEY, entry.get("model_path")) for name, entry in entries.items()]


def check_distillation(config: DictConfig) -> list[ConfigProblem]:
    """Problems of ``distillation.*`` when ``distillation.enabled`` (none otherwise)."""
    if not get(config, "distillation.enabled"):
        return []
    problems = _loss_problems(config)
    for key in ("distillation.n_gpus_per_node", "distillation.nnodes"):
        value = get(config, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(ConfigProblem(key, f"must be an integer >= 1 with distillation enabled, got {value!r}.",
                                          f"set {key}=1 (the teachers' pool: n_gpus_per_node x nnodes processes)."))
    if get(config, f"{ACTOR}.strategy") == "megatron":
        problems.append(ConfigProblem(f"{ACTOR}.strategy", "on-policy distillation with a Megatron actor and "
                                      "teacher is not implemented.", "use actor_rollout_ref.actor.strategy=fsdp2."))
    sizes = ("log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size", "log_prob_use_dynamic_bsz")
    if not any(get(config, f"{REF}.{name}") for name in sizes):
        key = f"{REF}.log_prob_micro_batch_size_per_gpu"
        problems.append(ConfigProblem(key, "the teachers compute their log-probs in the reference policy's "
                                      "micro-batches, and none is set.", f"set {key}=<samples per forward>, or "
                                      f"{REF}.log_prob_use_dynamic_bsz=True."))
    return problems + _teacher_problems(config)


def _loss_problems(config: DictConfig) -> list[ConfigProblem]:
    mode, use_pg = get(config, f"{_LOSS}.loss_mode"), get(config, f"{_LOSS}.use_policy_gradient")
    problems = []
    topk = get(config, f"{_LOSS}.topk")
    if mode == "forward_kl_topk" and (not isinstance(topk, int) or isinstance(topk, bool) or topk < 1):
        problems.append(ConfigProblem(f"{_LOSS}.topk", f"loss_mode=forward_kl_topk needs an integer topk >= 1, got "
                                      f"{topk!r}.", f"set {_LOSS}.topk=32 (verl's default) or another k."))
    if mode == "forward_kl_topk" and use_pg:  # as verl: allowed, warned
        warn_once(f"{_LOSS}.use_policy_gradient=True with loss_mode=forward_kl_topk: the policy gradient moves only "
                  "the sampled token's log-prob, so the teacher's top-k distribution is mostly unused; set "
                  "use_policy_gradient=False to backpropagate the top-k forward KL.")
    if mode not in RUNNABLE_LOSS_MODES:
        problems.append(ConfigProblem(f"{_LOSS}.loss_mode", f"unknown loss mode {mode!r}.",
                                      f"use one of {list(RUNNABLE_LOSS_MODES)}."))
    elif mode in ("k1", "kl") and not use_pg:
        problems.append(ConfigProblem(f"{_LOSS}.loss_mode", "a supervised k1 loss is refused (as verl): its gradient "
                                      "does not depend on the teacher's log-probs.",
                                      "set distillation.distillation_loss.use_policy_gradient=True, or loss_mode=k3."))
    if use_pg and get(config, f"{_LOSS}.policy_loss_mode") != "vanilla":
        problems.append(ConfigProblem(f"{_LOSS}.policy_loss_mode", "only vanilla is supported with "
                                      "use_policy_gradient (as verl).", f"set {_LOSS}.policy_loss_mode=vanilla."))
    return problems


def _teacher_problems(config: DictConfig) -> list[ConfigProblem]:
    problems, seen = [], set()
    for spec in teacher_specs(config):
        prefix = f"distillation.teacher_models.{spec.name}"
        if not spec.model_path:
            problems.append(ConfigProblem(f"{prefix}.model_path", "a teacher needs a model folder.",
                                          f"set {prefix}.model_path=<a model with the student's tokenizer>."))
        if spec.key in ("None", "") or spec.key in seen:
            problems.append(ConfigProblem(f"{prefix}.key", f"every teacher of several needs a distinct key, got "
                                          f"{spec.key!r}.", f"set {prefix}.key=<a value of the samples' "
                                          f"{get(config, 'distillation.teacher_key')} field>."))
        seen.add(spec.key)
        name = get(config, f"{prefix}.inference.name")
        if name not in ("hf", None):
            problems.append(ConfigProblem(f"{prefix}.inference.name", f"a served {name} teacher is not implemented: "
                                          "hybridrl's teacher is an FSDP forward (as the reference policy).",
                                          f"set {prefix}.inference.name=hf."))
    return problems
