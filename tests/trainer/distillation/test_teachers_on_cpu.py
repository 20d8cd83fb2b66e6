"""Teachers.score: each row scored by the teacher its teacher_key names (fake worker groups), padded per group."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.trainer.distillation.teachers import Teachers
from hybridrl.trainer.ppo.stages import StageError
from hybridrl.workers.actor.distillation_update import (
    DISTILLATION_META_KEY,
    TEACHER_LOG_PROBS_KEY,
    DistillationLossParams,
)

PARAMS = DistillationLossParams(loss_mode="k3", topk=32, log_prob_min_clamp=None, use_task_rewards=True,
                                distillation_loss_coef=1.0,
                                loss_max_clamp=None, use_policy_gradient=False, clip_ratio_low=0.2, clip_ratio_high=0.2)


class FakeTeacher:
    """A worker group of ``world_size`` ranks whose log-prob of every token is ``value``; records batch sizes."""

    def __init__(self, value: float, world_size: int = 2) -> None:
        self.value, self.world_size, self.sizes = value, world_size, []

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        assert len(data) % self.world_size == 0  # DP_COMPUTE_PROTO splits evenly
        self.sizes.append(len(data))
        shape = data.batch["responses"].shape
        tensors = {"ref_log_prob": torch.full(shape, self.value)}
        if data.meta_info.get("teacher_topk"):  # the top-k loss asks for the teacher's top-k
            k = data.meta_info["teacher_topk"]
            tensors["topk_log_probs"] = torch.full((*shape, k), self.value)
            tensors["topk_ids"] = torch.arange(k).expand(*shape, k) + int(-self.value)
        return DataProto.from_dict(tensors=tensors)


def _batch(sources: list[str]) -> DataProto:
    return DataProto.from_dict(tensors={"responses": torch.zeros(len(sources), 3, dtype=torch.long)},
                               non_tensors={"data_source": np.array(sources, dtype=object)})


def test_rows_go_to_the_teacher_of_their_data_source():
    math_teacher, code_teacher = FakeTeacher(-1.0), FakeTeacher(-2.0)
    teachers = Teachers({"math": math_teacher, "code": code_teacher}, "data_source", PARAMS)
    scored, metrics = teachers.score(_batch(["math", "code", "math", "math", "code"]))
    torch.testing.assert_close(scored.batch[TEACHER_LOG_PROBS_KEY][:, 0], torch.tensor([-1.0, -2.0, -1.0, -1.0, -2.0]))
    assert math_teacher.sizes == [4] and code_teacher.sizes == [2]  # 3 math rows padded to 4 for 2 ranks
    assert scored.meta_info[DISTILLATION_META_KEY] == PARAMS and "timing_s/teacher_log_prob" in metrics


def test_a_single_teacher_scores_every_row_whatever_its_source():
    teacher = FakeTeacher(-0.5, world_size=1)
    scored, _ = Teachers({"default": teacher}, "data_source", PARAMS).score(_batch(["a", "b"]))
    assert torch.equal(scored.batch[TEACHER_LOG_PROBS_KEY], torch.full((2, 3), -0.5))


def test_a_row_without_a_teacher_names_the_key_and_the_teachers():
    teachers = Teachers({"math": FakeTeacher(-1.0), "code": FakeTeacher(-2.0)}, "data_source", PARAMS)
    expected = r"teacher_log_prob.*data_source=\['poetry'\] have no teacher.*\['code', 'math'\]"
    with pytest.raises(StageError, match=expected):
        teachers.score(_batch(["math", "poetry"]))
    with pytest.raises(StageError, match="distillation.teacher_key='task'"):
        Teachers({"math": FakeTeacher(-1.0), "code": FakeTeacher(-2.0)}, "task", PARAMS).score(_batch(["math"]))


def test_the_top_k_loss_asks_each_teacher_for_its_top_k():
    from dataclasses import replace

    params = replace(PARAMS, loss_mode="forward_kl_topk", topk=3)
    teachers = Teachers({"math": FakeTeacher(-1.0), "code": FakeTeacher(-2.0)}, "data_source", params)
    scored, _ = teachers.score(_batch(["math", "code", "math"]))
    log_probs, ids = scored.batch["teacher_topk_logprobs"], scored.batch["teacher_topk_ids"]
    assert log_probs.shape == ids.shape == (3, 3, 3)
    torch.testing.assert_close(log_probs[:, 0, 0], torch.tensor([-1.0, -2.0, -1.0]))
    assert ids[1, 0].tolist() == [2, 3, 4] and ids[0, 0].tolist() == [1, 2, 3]
    assert TEACHER_LOG_PROBS_KEY in scored.batch.keys()
    plain, _ = Teachers({"math": FakeTeacher(-1.0)}, "data_source", PARAMS).score(_batch(["math"]))
    assert "teacher_topk_ids" not in plain.batch.keys()  # the estimators need the sampled token's only
