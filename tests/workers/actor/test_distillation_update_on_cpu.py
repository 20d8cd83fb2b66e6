"""The distillation term inside DataParallelPPOActor.update_policy on the tiny Qwen2 model (fp32, CPU)."""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.distillation_update import (
    DISTILLATION_META_KEY,
    TEACHER_LOG_PROBS_KEY,
    DistillationLossParams,
)


def _params(**overrides) -> DistillationLossParams:
    values = dict(loss_mode="k3", topk=32, log_prob_min_clamp=None, use_task_rewards=True, distillation_loss_coef=1.0,
                  loss_max_clamp=None,
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


# ----------------------------------------------------------------------------- top-k forward KL (forward_kl_topk)

TOPK_IDS, TOPK_LOG_PROBS = "teacher_topk_ids", "teacher_topk_logprobs"


def _teacher_topk(model, config, data, k, temperature=1.0, use_remove_padding=False, max_token_len=None):
    """A teacher's forward (the reference actor's ``compute_token_outputs`` with ``topk``); ``max_token_len``:
    token-budget micro-batches (rows reordered, then restored)."""
    data = copy.deepcopy(data)
    data.meta_info.update(micro_batch_size=4, use_dynamic_bsz=max_token_len is not None, max_token_len=max_token_len,
                          temperature=temperature)
    actor = DataParallelPPOActor(config, model, use_remove_padding=use_remove_padding)
    outputs = actor.compute_token_outputs(data, topk=k)
    return outputs["topk_log_probs"], outputs["topk_ids"]


def _with_topk_teacher(data, teacher, params):
    data.batch[TOPK_LOG_PROBS], data.batch[TOPK_IDS] = teacher
    data.meta_info[DISTILLATION_META_KEY] = params
    return data


def test_the_teachers_top_k_is_torch_topk_of_an_hf_forward_padded_and_packed(causal_lm, make_batch,
                                                                              make_actor_config):
    data, temperature, k = make_batch(batch_size=4), 0.7, 8
    batch = data.batch
    response_length = batch["responses"].shape[1]
    with torch.no_grad():
        logits = causal_lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           position_ids=batch["position_ids"]).logits[:, -response_length - 1 : -1]
    expected = torch.topk(torch.log_softmax(logits.float() / temperature, dim=-1), k, dim=-1)
    mask = batch["response_mask"].bool()
    for packed, budget in ((False, None), (True, None), (True, 20)):
        log_probs, ids = _teacher_topk(causal_lm, make_actor_config(), data, k, temperature, packed, budget)
        assert log_probs.shape == ids.shape == (*mask.shape, k)
        torch.testing.assert_close(log_probs[mask], expected.values[mask], atol=1e-5, rtol=1e-5)
        assert torch.equal(ids[mask], expected.indices[mask])


def test_student_log_probs_at_ids_match_log_softmax_with_its_gradient():
    from hybridrl.workers.actor.distillation_update import log_probs_at_ids

    logits = torch.randn(2, 3, 11, requires_grad=True)
    next_tokens, ids, temperature = torch.randint(0, 11, (2, 3)), torch.randint(0, 11, (2, 3, 4)), 0.8
    full = torch.log_softmax(logits / temperature, dim=-1)
    log_probs = full.gather(-1, next_tokens.unsqueeze(-1)).squeeze(-1)
    at_ids, own_ids = log_probs_at_ids(logits, next_tokens, log_probs, ids, temperature)
    torch.testing.assert_close(at_ids, full.gather(-1, ids))
    assert torch.equal(own_ids, torch.topk(logits, 4, dim=-1).indices)
    (grad,) = torch.autograd.grad(at_ids.sum(), logits)
    expected = torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids)
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    torch.testing.assert_close(grad, expected_grad)


def test_a_teacher_equal_to_the_student_gives_zero_forward_kl_with_k_the_vocabulary(causal_lm, make_batch,
                                                                                      make_actor_config):
    config = make_actor_config()
    data = make_batch(batch_size=4)
    vocab_size = causal_lm.config.vocab_size
    teacher = _teacher_topk(causal_lm, config, data, vocab_size)
    params = _params(loss_mode="forward_kl_topk", topk=vocab_size, use_task_rewards=False)
    _, metrics = _update(causal_lm, config, _with_topk_teacher(data, teacher, params))
    assert metrics["distillation/loss"][0] == pytest.approx(0.0, abs=1e-5)
    assert metrics["distillation/teacher_mass"][0] == pytest.approx(1.0, abs=1e-4)
    assert metrics["distillation/student_mass"][0] == pytest.approx(1.0, abs=1e-4)
    assert metrics["distillation/overlap_ratio"][0] == pytest.approx(1.0)
    # the gradient Σ_v (q_v − p_v) ∂z_v vanishes (up to rounding, which AdamW would blow up to an lr-sized step)
    assert metrics["actor/grad_norm"][0] < 1e-5


@pytest.fixture(scope="module")
def other_teacher(causal_lm):
    """The student with perturbed weights: another distribution over the same vocabulary."""
    teacher = copy.deepcopy(causal_lm)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return teacher


def test_a_different_teacher_pulls_the_student_towards_it_on_the_top_k(causal_lm, other_teacher, make_batch,
                                                                       make_actor_config):
    config = make_actor_config(optim={"lr": 1e-2})
    data = make_batch(batch_size=4)
    teacher = _teacher_topk(other_teacher, config, data, 8)
    params = _params(loss_mode="forward_kl_topk", topk=8, use_task_rewards=False)
    student, first = _update(causal_lm, config, _with_topk_teacher(copy.deepcopy(data), teacher, params))
    _, second = _update(student, config, _with_topk_teacher(copy.deepcopy(data), teacher, params))
    assert first["distillation/loss"][0] > 0.05
    assert second["distillation/loss"][0] < first["distillation/loss"][0]
    for key in ("distillation/student_mass", "distillation/student_mass_min", "distillation/student_mass_max",
                "distillation/teacher_mass", "distillation/teacher_mass_min", "distillation/teacher_mass_max",
                "distillation/overlap_ratio", "distillation/overlap_token_advantage", "distillation/loss_min",
                "distillation/loss_max"):
        assert key in first, key
    assert "distillation/abs_loss" not in first  # the estimators' metric only (as verl)


def test_the_top_k_loss_is_the_same_padded_and_packed(causal_lm, other_teacher, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    teacher = _teacher_topk(other_teacher, make_actor_config(), data, 8)
    params = _params(loss_mode="forward_kl_topk", topk=8, use_task_rewards=False)
    losses = [_update(causal_lm, make_actor_config(use_remove_padding=packed),
                      _with_topk_teacher(copy.deepcopy(data), teacher, params))[1]["distillation/loss"][0]
              for packed in (False, True)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
