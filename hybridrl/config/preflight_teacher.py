"""Preflight of distillation teachers: a teacher scores the student's token ids, so its vocabulary must be the
student's. Refused before Ray starts, naming both sizes: a ``config.json`` ``vocab_size`` (the logits' width) that
differs, or a tokenizer that maps any token to another id (the same size with another vocabulary included); and
with ``loss_mode=forward_kl_topk`` a ``distillation.distillation_loss.topk`` larger than the vocabulary.
"""

from __future__ import annotations

import json
import os
from typing import Any

from omegaconf import DictConfig

from hybridrl.config.access import MODEL, get
from hybridrl.config.checks_distillation import teacher_specs
from hybridrl.config.errors import ConfigProblem

__all__ = ["check_teacher_vocabulary"]


def check_teacher_vocabulary(config: DictConfig) -> list[ConfigProblem]:
    """A problem per teacher whose model or tokenizer vocabulary differs from the student's (local folders only)."""
    if not get(config, "distillation.enabled"):
        return []
    student = _folder(get(config, f"{MODEL}.path"))
    if student is None:
        return []
    student_tokenizer = _folder(get(config, f"{MODEL}.tokenizer_path")) or student
    problems = []
    for spec in teacher_specs(config):
        teacher = _folder(spec.model_path)
        if teacher is None:
            continue
        key = f"distillation.teacher_models.{spec.name}.model_path"
        mismatch = _vocabulary_mismatch(student, student_tokenizer, teacher)
        if mismatch is not None:
            problems.append(ConfigProblem(
                key, f"the teacher {teacher} has {mismatch} ({student} is the student): the teacher must score the "
                "student's token ids with the same tokenizer.",
                f"point {key} at a teacher of the student's model family (the same tokenizer and vocabulary)."))
    return problems + _topk_problems(config, student)


def _topk_problems(config: DictConfig, student: str) -> list[ConfigProblem]:
    """``topk`` larger than the student's ``config.json`` ``vocab_size`` (forward_kl_topk only)."""
    key = "distillation.distillation_loss.topk"
    topk, vocab_size = get(config, key), _config_vocab_size(student)
    if get(config, "distillation.distillation_loss.loss_mode") != "forward_kl_topk" or vocab_size is None:
        return []
    if isinstance(topk, int) and topk > vocab_size:
        return [ConfigProblem(key, f"the top-k forward KL takes the teacher's {topk} most likely tokens, and the "
                              f"vocabulary of {student} has {vocab_size}.", f"set {key} <= {vocab_size}.")]
    return []


def _folder(path: Any) -> str | None:
    folder = os.path.abspath(os.path.expanduser(str(path or "")))
    return folder if path and os.path.isdir(folder) else None


def _vocabulary_mismatch(student: str, student_tokenizer: str, teacher: str) -> str | None:
    """Why the teacher's vocabulary is not the student's (the rest of a sentence), or None."""
    student_size, teacher_size = _config_vocab_size(student), _config_vocab_size(teacher)
    if None not in (student_size, teacher_size) and student_size != teacher_size:
        return f"a vocabulary of {teacher_size} tokens (config.json vocab_size), the student {student_size}"
    student_vocab, teacher_vocab = _tokenizer_vocab(student_tokenizer), _tokenizer_vocab(teacher)
    if student_vocab is None or teacher_vocab is None or student_vocab == teacher_vocab:
        return None
    return (f"a tokenizer vocabulary of {len(teacher_vocab)} tokens, the student's tokenizer {len(student_vocab)}"
            f"{' with other token ids' if len(teacher_vocab) == len(student_vocab) else ''}")


def _config_vocab_size(folder: str) -> int | None:
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            model_config = json.load(handle)
    except (OSError, ValueError):
        return None
    size = model_config.get("vocab_size") if isinstance(model_config, dict) else None
    if size is None and isinstance(model_config, dict):  # a multimodal config nests it
        size = (model_config.get("text_config") or {}).get("vocab_size")
    return size if isinstance(size, int) else None


def _tokenizer_vocab(folder: str) -> dict[str, int] | None:
    """The token → id map of the folder's tokenizer, or None without tokenizer files."""
    if not any(os.path.exists(os.path.join(folder, name)) for name in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    try:
        return dict(AutoTokenizer.from_pretrained(folder).get_vocab())
    except (OSError, ValueError):
        return None
