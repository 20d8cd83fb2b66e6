"""Reward managers: score on the last valid token, extra info, printing, batch call, DAPO overlong
penalty, prime timeout, and the error policy for raising / NaN / None / hanging reward functions."""

import logging
import math
import time

import pytest
import torch
from rm_testlib import make_batch, valid_lengths

from hybridrl.workers.reward_manager import (
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    PrimeRewardManager,
    RewardFunctionError,
    get_reward_manager_cls,
)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def batch(tokenizer):
    return make_batch(
        tokenizer,
        prompts=["What is 3 + 4?", "What is 5 * 5?", "What is 9 - 1?"],
        responses=["The answer is 7", "25", "it is 9"],
        ground_truths=["7", "25", "8"],
        data_sources=["arithmetic"] * 3,
    )


def test_registry():
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    assert get_reward_manager_cls("dapo") is DAPORewardManager
    with pytest.raises(ValueError, match="Unknown reward manager: nope "):
        get_reward_manager_cls("nope")


def test_naive_score_on_last_valid_token(tokenizer, batch):
    reward = NaiveRewardManager(tokenizer, num_examine=0)(batch)
    lengths = valid_lengths(batch)
    assert reward.shape == batch.batch["responses"].shape and reward.dtype == torch.float32
    expected = torch.zeros_like(reward)
    expected[0, lengths[0] - 1] = 1.0  # "The answer is 7" vs 7
    expected[1, lengths[1] - 1] = 1.0  # "25" vs 25
    # row 2: "it is 9" vs 8 → 0 everywhere
    assert torch.equal(reward, expected)


def test_reward_fn_key_picks_the_column_passed_as_data_source(tokenizer, batch):
    # data.reward_fn_key: the scorer's data_source comes from that non-tensor column
    batch.non_tensor_batch["task"] = batch.non_tensor_batch["data_source"].copy()
    batch.non_tensor_batch["task"][:] = ["a", "b", "c"]
    seen = []

    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(data_source)
        return 1.0

    NaiveRewardManager(tokenizer, 0, compute_score=scorer, reward_fn_key="task")(batch)
    assert seen == ["a", "b", "c"]


def dict_scorer(data_source, solution_str, ground_truth, extra_info=None):
    return {
        "score": 0.5 if ground_truth in solution_str else -0.5,
        "pred": solution_str[-2:],
        "idx": extra_info["index"],
    }


def test_naive_dict_results_and_printing(tokenizer, batch, capsys):
    out = NaiveRewardManager(tokenizer, num_examine=1, compute_score=dict_scorer)(batch, return_dict=True)
    lengths = valid_lengths(batch)
    scores = [out["reward_tensor"][i, lengths[i] - 1].item() for i in range(3)]
    assert scores == [0.5, 0.5, -0.5]
    assert out["reward_extra_info"]["score"] == [0.5, 0.5, -0.5]
    assert out["reward_extra_info"]["idx"] == [0, 1, 2]
    printed = capsys.readouterr().out
    assert printed.count("[prompt]") == 1 and "[ground_truth] 7" in printed  # one sample per data source


def test_rm_scores_short_circuit(tokenizer, batch):
    batch.batch["rm_scores"] = torch.full(batch.batch["responses"].shape, 2.0)
    manager = NaiveRewardManager(tokenizer, num_examine=0, compute_score=lambda **kw: 1 / 0)
    assert torch.equal(manager(batch), batch.batch["rm_scores"])
    assert torch.equal(manager(batch, return_dict=True)["reward_tensor"], batch.batch["rm_scores"])


def raising_scorer(data_source, solution_str, ground_truth, extra_info=None):
    if ground_truth == "25":
        raise KeyError("boom")
    return 1.0


@pytest.mark.parametrize("cls", [NaiveRewardManager, DAPORewardManager])
def test_raising_reward_fn_gives_clear_error(tokenizer, batch, cls):
    with pytest.raises(
        RewardFunctionError, match=r"raising_scorer failed on sample 1 \(data_source='arithmetic'\).*boom"
    ):
        cls(tokenizer, num_examine=0, compute_score=raising_scorer)(batch)


def test_on_error_zero_logs_and_scores_zero(tokenizer, batch, caplog):
    manager = NaiveRewardManager(tokenizer, 0, compute_score=raising_scorer, on_error="zero")
    with caplog.at_level(logging.WARNING):
        reward = manager(batch)
    assert reward.sum(-1).tolist() == [1.0, 0.0, 1.0]
    assert "sample 1" in caplog.text and "on_error=zero" in caplog.text


@pytest.mark.parametrize("bad", [None, math.nan, float("inf"), "1.0", {"no_score": 1}])
def test_bad_return_values(tokenizer, batch, bad):
    manager = NaiveRewardManager(tokenizer, 0, compute_score=lambda **kw: bad)
    with pytest.raises(RewardFunctionError, match=r"sample 0 \(data_source='arithmetic'\)"):
        manager(batch)


def test_hanging_reward_fn_with_timeout(tokenizer, batch):
    def slow(**kw):
        time.sleep(3)
        return 1.0

    manager = NaiveRewardManager(tokenizer, 0, compute_score=slow, timeout_s=0.2)
    with pytest.raises(RewardFunctionError, match="timeout_s=0.2"):
        manager(batch)


def test_batch_manager_one_call(tokenizer, batch):
    calls = []

    def batch_scorer(data_sources, solution_strs, ground_truths, extra_infos, bonus=0.0):
        calls.append(len(solution_strs))
        return [float(g in s) + bonus for s, g in zip(solution_strs, ground_truths)]

    manager = BatchRewardManager(tokenizer, 0, compute_score=batch_scorer, bonus=0.25)
    reward = manager(batch)
    assert calls == [3]
    assert reward.sum(-1).tolist() == [1.25, 1.25, 0.25]
    lengths = valid_lengths(batch)
    assert all(reward[i, lengths[i] - 1] != 0 for i in range(3))


def test_dapo_overlong_penalty_values(tokenizer):
    tok_id = tokenizer.encode("7", add_special_tokens=False)[0]
    # R = 12, buffer 4 → expected_len 8; lengths 6, 9, 10, 12
    data = make_batch(tokenizer, ["q"] * 4, [[tok_id] * n for n in (6, 9, 10, 12)], ["7"] * 4, ["arithmetic"] * 4, R=12)
    cfg = {"enable": True, "len": 4, "penalty_factor": 1.0, "log": True}
    manager = DAPORewardManager(tokenizer, 0, compute_score=lambda **kw: 1.0, max_resp_len=12, overlong_buffer_cfg=cfg)
    out = manager(data, return_dict=True)
    # penalty = min(-(L - 8) / 4 * 1.0, 0): L=6 → 0; 9 → -0.25; 10 → -0.5; 12 → -1.0
    assert out["reward_tensor"].sum(-1).tolist() == pytest.approx([1.0, 0.75, 0.5, 0.0])
    assert out["reward_tensor"][3, 11] == pytest.approx(0.0) and out["reward_tensor"][1, 8] == pytest.approx(0.75)
    assert out["reward_extra_info"]["overlong_reward"] == pytest.approx([0.0, -0.25, -0.5, -1.0])
    assert out["reward_extra_info"]["overlong"] == [False, True, True, True]
    assert out["reward_extra_info"]["acc"] == [1.0] * 4
    # disabled buffer: plain scores
    off = DAPORewardManager(
        tokenizer, 0, compute_score=lambda **kw: 1.0, max_resp_len=12, overlong_buffer_cfg={"enable": False}
    )
    assert off(data).sum(-1).tolist() == [1.0] * 4


def slow_for_hang(data_source, solution_str, ground_truth, extra_info=None):
    if data_source == "hang":
        time.sleep(60)
    return float(ground_truth in solution_str)


@pytest.mark.slow
def test_prime_parallel_with_timeout(tokenizer, caplog):
    data = make_batch(
        tokenizer, ["a", "b", "c"], ["7", "7", "8"], ["7", "7", "7"], ["arithmetic", "hang", "arithmetic"]
    )
    manager = PrimeRewardManager(tokenizer, 0, compute_score=slow_for_hang, timeout_s=2.0, num_processes=2)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        reward = manager(data)
    assert time.monotonic() - start < 20
    assert reward.sum(-1).tolist() == [1.0, 0.0, 0.0]  # the hung sample scores 0
    assert "[Timeout]" in caplog.text and "sample 1" in caplog.text
    assert data.batch["acc"].tolist() == [1.0, 0.0, 0.0]


@pytest.mark.slow
def test_prime_raising_fn_clear_error(tokenizer, batch):
    manager = PrimeRewardManager(tokenizer, 0, compute_score=raising_scorer, timeout_s=10, num_processes=2)
    with pytest.raises(RewardFunctionError, match="sample 1"):
        manager(batch)


@pytest.mark.parametrize("value", [torch.tensor(1.0), torch.tensor([1.0])])
def test_a_one_element_tensor_score_is_a_number(tokenizer, batch, value):
    manager = NaiveRewardManager(tokenizer=tokenizer, num_examine=0, compute_score=lambda **kw: value)
    assert manager(batch).sum(-1).tolist() == [1.0, 1.0, 1.0]
