"""``distillation.*`` checks before Ray starts: what runs passes, what is not implemented is refused by key."""

from __future__ import annotations

import pytest
from config_testlib import compose_config

from hybridrl.algos.distillation import ESTIMATOR_LOSS_MODES, TOPK_LOSS_MODES
from hybridrl.config.checks_distillation import RUNNABLE_LOSS_MODES, check_distillation, teacher_specs
from hybridrl.config.unsupported import check_unsupported

ENABLED = ["distillation.enabled=True", "distillation.n_gpus_per_node=1", "distillation.nnodes=1",
           "distillation.teacher_models.teacher_model.model_path=/teacher", "actor_rollout_ref.rollout.name=hf",
           "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"]


def _problems(*overrides: str) -> dict[str, str]:
    config = compose_config("ppo_trainer", [*ENABLED, *overrides])
    return {problem.key: str(problem) for problem in check_distillation(config) + check_unsupported(config)}


def test_the_runnable_loss_modes_are_the_actors():
    assert RUNNABLE_LOSS_MODES == ESTIMATOR_LOSS_MODES + TOPK_LOSS_MODES


def test_a_single_hf_teacher_with_k3_passes_and_disabled_checks_nothing():
    assert _problems() == {}
    assert check_distillation(compose_config("ppo_trainer", [])) == []


@pytest.mark.parametrize(("overrides", "key", "text"), [
    (["distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=0"],
     "distillation.distillation_loss.topk", "integer topk >= 1"),
    (["distillation.distillation_loss.loss_mode=k1"], "distillation.distillation_loss.loss_mode", "supervised k1"),
    (["distillation.distillation_loss.use_policy_gradient=True",
      "distillation.distillation_loss.policy_loss_mode=gspo"],
     "distillation.distillation_loss.policy_loss_mode", "vanilla"),
    (["distillation.nnodes=0"], "distillation.nnodes", ">= 1"),
    (["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null"],
     "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "reference policy's micro-batches"),
    (["distillation.teacher_models.teacher_model.inference.name=vllm"],
     "distillation.teacher_models.teacher_model.inference.name", "served vllm teacher"),
    (["distillation.teacher_models.teacher_model.model_path=null"],
     "distillation.teacher_models.teacher_model.model_path", "model folder"),
])
def test_what_is_not_implemented_is_refused_by_key(overrides, key, text):
    problems = _problems(*overrides)
    assert key in problems and text in problems[key], problems


def test_k1_as_a_policy_gradient_reward_passes():
    assert _problems("distillation.distillation_loss.loss_mode=k1",
                     "distillation.distillation_loss.use_policy_gradient=True") == {}


def test_the_top_k_forward_kl_passes_and_warns_with_the_policy_gradient():
    assert _problems("distillation.distillation_loss.loss_mode=forward_kl_topk") == {}
    with pytest.warns(UserWarning, match="use_policy_gradient=True with loss_mode=forward_kl_topk"):
        assert _problems("distillation.distillation_loss.loss_mode=forward_kl_topk",
                         "distillation.distillation_loss.use_policy_gradient=True") == {}


def test_several_teachers_drop_the_default_entry_and_need_distinct_keys():
    teachers = ["+distillation.teacher_models.math.model_path=/m", "+distillation.teacher_models.math.key=gsm8k",
                "+distillation.teacher_models.code.model_path=/c", "+distillation.teacher_models.code.key=gsm8k"]
    config = compose_config("ppo_trainer", [*ENABLED, *teachers])
    assert [(spec.name, spec.key) for spec in teacher_specs(config)] == [("math", "gsm8k"), ("code", "gsm8k")]
    problems = {problem.key: str(problem) for problem in check_distillation(config)}
    assert "distinct key" in problems["distillation.teacher_models.code.key"]
    single = teacher_specs(compose_config("ppo_trainer", ENABLED))
    assert [(spec.name, spec.key, spec.model_path) for spec in single] == [("teacher_model", "default", "/teacher")]
