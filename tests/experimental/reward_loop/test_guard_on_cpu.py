"""A judge that raises, hangs, or returns no usable score gives its sample the fallback score and is counted
(``reward/judge_errors``, ``reward/judge_timeouts``); the step goes on."""

import time

import numpy as np
import pytest
import torch
from reward_loop_testlib import loop_config, write_scores
from rm_testlib import make_batch

from hybridrl.experimental.reward_loop.guard import ScoringPolicy, finite_score, judge_metrics
from hybridrl.experimental.reward_loop.reward_loop import RewardLoopWorker, collect_scores
from hybridrl.trainer.ppo import stages

CASES = ["ok", "raise", "hang", "nan", "none", "text", "nodict", "ok"]


def _batch(tokenizer, ground_truths):
    n = len(ground_truths)
    return make_batch(tokenizer, ["Q?"] * n, ["A"] * n, ground_truths, ["judge"] * n)


def test_every_failure_gets_the_fallback_and_is_counted(tmp_path, tiny_tokenizer):
    config = loop_config(
        write_scores(tmp_path), "flaky_judge", reward_kwargs={"compute_score_timeout": 0.5, "fallback_score": -1.0}
    )
    batch = _batch(tiny_tokenizer, CASES)
    worker = RewardLoopWorker(config, tokenizer=tiny_tokenizer)
    start = time.perf_counter()
    rm_scores, extra, metrics = collect_scores(
        batch, worker.compute_score_batch_sync(batch), type(worker.reward_manager)
    )
    assert time.perf_counter() - start < 5  # the 30 s hang was cut at 0.5 s
    # ok -> 0.5; raise, nan, none, text ("seven"), nodict (no "score" key) -> errors; hang -> timeout
    assert rm_scores.sum(-1).tolist() == [0.5, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.5]
    assert metrics == {"reward/judge_errors": 5.0, "reward/judge_timeouts": 1.0}
    assert extra["judge_error"] == [False, True, False, True, True, True, True, False]
    assert extra["judge_timeout"] == [False, False, True, False, False, False, False, False]
    assert extra["acc"] == [0.5, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.5]


def test_a_hanging_plain_function_times_out_too(tmp_path, tiny_tokenizer):
    config = loop_config(write_scores(tmp_path), "slow_sync", reward_kwargs={"compute_score_timeout": 0.3})
    batch = _batch(tiny_tokenizer, ["hang", "ok", "ok"])
    worker = RewardLoopWorker(config, tokenizer=tiny_tokenizer)
    rm_scores, _, metrics = collect_scores(batch, worker.compute_score_batch_sync(batch), type(worker.reward_manager))
    assert rm_scores.sum(-1).tolist() == [0.0, 0.25, 0.25]  # fallback_score defaults to 0.0, verl's score
    assert metrics == {"reward/judge_errors": 0.0, "reward/judge_timeouts": 1.0}


def test_the_policy_reads_either_spelling_of_reward_kwargs():
    assert ScoringPolicy.from_config(loop_config()) == ScoringPolicy(0.0, None)
    config = loop_config(reward={"reward_kwargs": {"compute_score_timeout": 2, "fallback_score": -0.5}})
    assert ScoringPolicy.from_config(config) == ScoringPolicy(-0.5, 2)
    assert ScoringPolicy.from_config(loop_config(reward_kwargs={"fallback_score": 1})) == ScoringPolicy(1.0, None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1.0),
        (0.5, 0.5),
        (True, 1.0),
        (np.float32(0.25), 0.25),
        (torch.tensor([2.0]), 2.0),
        (float("nan"), None),
        (float("inf"), None),
        (None, None),
        ("1.0", None),
        (torch.tensor([1.0, 2.0]), None),
    ],
)
def test_finite_score(value, expected):
    assert finite_score(value) == expected


def test_the_reward_stage_turns_the_flags_into_step_metrics(tiny_tokenizer):
    batch = _batch(tiny_tokenizer, ["a", "b", "c"])

    def reward_fn(data, return_dict=False):
        return {
            "reward_tensor": torch.zeros(3, 12),
            "reward_extra_info": {
                "acc": [1.0, 0.0, 0.0],
                "judge_error": [False, True, False],
                "judge_timeout": [False, False, True],
            },
        }

    out, metrics = stages.reward(batch, reward_fn)
    assert metrics["reward/judge_errors"] == 1.0 and metrics["reward/judge_timeouts"] == 1.0
    assert "judge_error" not in out.non_tensor_batch and list(out.non_tensor_batch["acc"]) == [1.0, 0.0, 0.0]
    assert judge_metrics({"acc": [1.0]}) == {}  # the driver's managers set no flags: no judge metrics
