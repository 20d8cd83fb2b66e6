"""On-policy distillation through ``python -m hybridrl.trainer.main_ppo`` on CPU: a tiny teacher (the student's
tokenizer, other weights) on its own pool scores the student's samples; 2 GRPO steps with the k3 loss mixed in, and
2 with the top-k forward KL (the teacher's top-k log-probs and ids, the student's log-probs there)."""

from __future__ import annotations

import math
import shutil

import pytest

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow

DISTILLATION_METRICS = ("distillation/loss", "distillation/loss_min", "distillation/loss_max",
                        "timing_s/teacher_log_prob")
# each loss mode's own metrics (verl's names)
MODE_METRICS = {
    "k3": ("distillation/abs_loss",),
    "forward_kl_topk": ("distillation/student_mass", "distillation/student_mass_min", "distillation/teacher_mass",
                        "distillation/teacher_mass_max", "distillation/overlap_ratio",
                        "distillation/overlap_token_advantage"),
}


@pytest.fixture(scope="module")
def teacher_dir(tiny_model_dir, tmp_path_factory):
    """The student's folder (tokenizer, config) with its weights perturbed: another model, the same vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("tiny_teacher") / "teacher"
    shutil.copytree(tiny_model_dir, out)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(out)
    return str(out)


@pytest.mark.parametrize("loss_mode", ["k3", "forward_kl_topk"])
def test_grpo_with_a_teacher_logs_finite_distillation_metrics(loss_mode, tiny_model_dir, teacher_dir,
                                                              arithmetic_data_dir, tmp_path):
    metrics_file = str(tmp_path / "metrics.jsonl")
    args = grpo_args(tiny_model_dir, arithmetic_data_dir, str(tmp_path / "ckpt"), **{
        "trainer.n_gpus_per_node": 1, "trainer.test_freq": -1, "trainer.save_freq": -1,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "distillation.enabled": True, "distillation.n_gpus_per_node": 1, "distillation.nnodes": 1,
        "distillation.teacher_models.teacher_model.model_path": teacher_dir,
        "distillation.distillation_loss.distillation_loss_coef": 0.5,
        "distillation.distillation_loss.loss_mode": loss_mode, "distillation.distillation_loss.topk": 8,
    })
    proc = run_main_ppo(args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    assert "[trainer] distillation_pool: teacher_model on 1 rank(s)" in proc.stdout, proc.stdout[-3000:]
    metrics = read_metrics(metrics_file)
    for step in (1, 2):
        for name in DISTILLATION_METRICS + MODE_METRICS[loss_mode]:
            assert name in metrics[step] and math.isfinite(metrics[step][name]), (step, name)
    assert metrics[1]["distillation/loss"] > 0  # the teacher differs from the student
    assert metrics[1]["distillation/loss_min"] <= metrics[1]["distillation/loss_max"]
