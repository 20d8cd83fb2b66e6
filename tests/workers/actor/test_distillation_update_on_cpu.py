"""The distillation term inside DataParallelPPOActor.update_policy on the tiny Qwen2 model (fp32, CPU)."""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.distillation import DISTILLATION_META_KEY, TEACHER_LOG_PROBS_KEY, DistillationLossParams


def _params(**overrides) -> DistillationLossParams:
    values = dict(loss_mode="k3", use_task_rewards=True, distillation_loss_coef=1.0, loss_max_clamp=None,
                  use_policy_gradient=False, clip_ratio_low=0.2, clip_ratio_high=0.2)
    return DistillationLossParams(**{**values, **overrides})


def _update(model, config, data):
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    metrics = DataParallelPPOActor(config, model, optimizer).update_policy(data)
    return model, metrics


def _with_teacher(data, teacher_log_probs, params):
    data.batch[TEACHER_LOG_PROBS_KEY] = teacher_log_probs
    data.meta_info[DISTILLATION_META_KEY] = params
    return data


def _log_probs(model, config, data):
    """The student's log-probs of its responses: a teacher equal to the student."""
    data = copy.deepcopy(data)
    data.meta_info.update(micro_batch_size=4, use_dynamic_bsz=False, max_token_len=None)
    log_probs, _ = DataParallelPPOActor(config, model).compute_log_prob(data)
    return log_probs


def _max_param_change(model_a, model_b) -> float:
    with torch.no_grad():
        return max(float((a - b).abs().max()) for a, b in zip(model_a.parameters(), model_b.parameters()))


def test_teacher_equal_to_student_without_task_loss_leaves_the_weights_unchanged(causal_lm, make_batch,
                                                                                   make_actor_config):
    config = make_actor_config()
    data = make_batch(batch_size=4)
    data = _with_teacher(data, _log_probs(causal_lm, config, data), _params(use_task_rewards=False))
    trained, metrics = _update(causal_lm, config, data)
    assert metrics["distillation/loss"][0] == pytest.approx(0.0, abs=1e-6)
    assert _max_param_change(causal_lm, trained) < 1e-6


def test_a_different_teacher_moves_the_student_without_task_loss(causal_lm, make_batch, make_actor_config):
    config = make_actor_config()
    data = make_batch(batch_size=4)
    teacher = _log_probs(causal_lm, config, data) - 1.0  # the teacher likes every sampled token less
    trained, metrics = _update(causal_lm, config, _with_teacher(data, teacher, _params(use_task_rewards=False)))
    # k3 at δ = 1: e^{−1} + 1 − 1 = 0.3679 per token
    assert metrics["distillation/loss"][0] == pytest.approx(0.3679, abs=1e-3)
    assert metrics["distillation/abs_loss"][0] == pytest.approx(0.3679, abs=1e-3)
    assert _max_param_change(causal_lm, trained) > 1e-5


def test_task_loss_plus_zero_distillation_equals_the_plain_update(causal_lm, make_batch, make_actor_config):
    config = make_actor_config()
    plain_data, distill_data = make_batch(batch_size=4), make_batch(batch_size=4)
    teacher = _log_probs(causal_lm, config, distill_data)
    plain, plain_metrics = _update(causal_lm, config, plain_data)
    distilled, metrics = _update(causal_lm, config, _with_teacher(distill_data, teacher, _params()))
    assert _max_param_change(plain, distilled) < 1e-6
    assert metrics["actor/pg_loss"][0] == pytest.approx(plain_metrics["actor/pg_loss"][0], abs=1e-6)


def test_policy_gradient_mode_reports_verl_metrics(causal_lm, make_batch, make_actor_config):
    config = make_actor_config()
    data = make_batch(batch_size=4)
    teacher = _log_probs(causal_lm, config, data) + 0.5
    params = _params(loss_mode="k1", use_policy_gradient=True, distillation_loss_coef=0.5)
    _, metrics = _update(causal_lm, config, _with_teacher(data, teacher, params))
    for key in ("distillation/loss", "distillation/pg_clipfrac", "distillation/ppo_kl", "distillation/loss_min",
                "distillation/loss_max", "distillation/abs_loss"):
        assert all(torch.isfinite(torch.tensor(metrics[key]))), key
    assert metrics["distillation/loss_max"][0] == pytest.approx(-0.5, abs=1e-4)  # k1 = log q − (log q + 0.5)
