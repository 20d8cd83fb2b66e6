"""A distillation teacher whose vocabulary differs from the student's is refused before Ray, naming both sizes."""

from __future__ import annotations

import os
import shutil

import pytest
from config_testlib import compose_config

from hybridrl.config.preflight_teacher import check_teacher_vocabulary


def _config(student: str, teacher: str, enabled: bool = True):
    return compose_config("ppo_trainer", [
        f"distillation.enabled={enabled}", f"actor_rollout_ref.model.path={student}",
        f"distillation.teacher_models.teacher_model.model_path={teacher}",
    ])


@pytest.fixture(scope="module")
def other_vocab_dir(tmp_path_factory):
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_other_vocab"), TinyModelSpec(tokenizer_vocab_size=384)))


def test_a_teacher_with_the_students_tokenizer_passes(tiny_model_dir, tmp_path):
    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_model_dir, teacher)
    assert check_teacher_vocabulary(_config(tiny_model_dir, str(teacher))) == []


def test_a_teacher_with_another_vocabulary_is_refused_naming_both_sizes(tiny_model_dir, other_vocab_dir):
    from transformers import AutoConfig

    student_size = AutoConfig.from_pretrained(tiny_model_dir).vocab_size
    teacher_size = AutoConfig.from_pretrained(other_vocab_dir).vocab_size
    assert student_size != teacher_size
    [problem] = check_teacher_vocabulary(_config(tiny_model_dir, other_vocab_dir))
    assert problem.key == "distillation.teacher_models.teacher_model.model_path"
    assert f"{teacher_size} tokens" in str(problem) and f"the student {student_size}" in str(problem)
    assert check_teacher_vocabulary(_config(tiny_model_dir, other_vocab_dir, enabled=False)) == []


def test_same_size_but_another_tokenizer_is_refused(tiny_model_dir, other_vocab_dir, tmp_path):
    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_model_dir, teacher)  # the student's weights and config.json, another tokenizer
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (teacher / name).exists():
            (teacher / name).unlink()
        source = f"{other_vocab_dir}/{name}"
        if os.path.exists(source):
            shutil.copy(source, teacher / name)
    [problem] = check_teacher_vocabulary(_config(tiny_model_dir, str(teacher)))
    assert "tokenizer vocabulary" in str(problem)


def test_a_topk_larger_than_the_vocabulary_is_refused_naming_the_key(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_model_dir, teacher)
    vocab_size = AutoConfig.from_pretrained(tiny_model_dir).vocab_size
    config = _config(tiny_model_dir, str(teacher))
    config.distillation.distillation_loss.loss_mode = "forward_kl_topk"
    config.distillation.distillation_loss.topk = vocab_size + 1
    [problem] = check_teacher_vocabulary(config)
    assert problem.key == "distillation.distillation_loss.topk" and f"<= {vocab_size}" in str(problem)
    config.distillation.distillation_loss.topk = vocab_size
    assert check_teacher_vocabulary(config) == []
