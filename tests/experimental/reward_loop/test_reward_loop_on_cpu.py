"""The reward loop's worker in-process: same scores as the driver's managers for rule rewards (sync and async
scoring functions), the ``limit`` manager's cap on calls in flight, a manager class loaded from a file, and the
trainer's choice between the driver path and the loop."""

import pytest
import torch
from reward_loop_testlib import MANAGER_PY, loop_config, write_scores
from rm_testlib import make_batch

from hybridrl.experimental.reward_loop.reward_loop import RewardLoopWorker, collect_scores, resolve_reward_manager_cls
from hybridrl.experimental.reward_loop.reward_manager import RateLimitedRewardManager, get_reward_manager_cls
from hybridrl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager, uses_reward_loop
from hybridrl.workers import reward_manager as driver


@pytest.fixture
def batch(tiny_tokenizer):
    return make_batch(
        tiny_tokenizer,
        prompts=["What is 3 + 4?", "What is 5 * 5?", "What is 9 - 1?", "What is 2 + 2?", "1 + 1?"],
        responses=["The answer is 7", "25", "it is 9", "#### 4", "so the result is 2 and more words here"],
        ground_truths=["7", "25", "8", "4", "2"],
        data_sources=["arithmetic"] * 5,
    )


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    RateLimitedRewardManager._class_initialized = False
    yield
    RateLimitedRewardManager._class_initialized = False


def _loop_scores(config, tokenizer, batch):
    worker = RewardLoopWorker(config, tokenizer=tokenizer)
    outputs = worker.compute_score_batch_sync(batch)
    return collect_scores(batch, outputs, type(worker.reward_manager))


@pytest.mark.parametrize("manager", ["naive", "dapo"])
@pytest.mark.parametrize("score_name", ["sync_score", "async_score", "dict_score"])
def test_same_scores_as_the_driver_managers(tmp_path, tiny_tokenizer, batch, manager, score_name):
    path = write_scores(tmp_path)
    config, driver_config = (
        loop_config(path, name, manager) for name in (score_name, score_name.replace("async", "sync"))
    )
    if manager == "dapo":  # L_max = 12, B = 4: responses longer than 8 tokens are penalised
        for cfg in (config, driver_config):
            cfg.reward_model.overlong_buffer = {"enable": True, "len": 4, "penalty_factor": 1.0, "log": True}
    expected = load_reward_manager(driver_config, tiny_tokenizer, num_examine=0)(batch, return_dict=True)
    assert isinstance(load_reward_manager(driver_config, tiny_tokenizer, num_examine=0), driver.AbstractRewardManager)
    rm_scores, extra, metrics = _loop_scores(config, tiny_tokenizer, batch)
    torch.testing.assert_close(rm_scores, expected["reward_tensor"], rtol=0, atol=0)
    assert rm_scores.sum() > 0  # some answers are right
    for key, values in expected["reward_extra_info"].items():
        assert extra[key] == list(values), key
    assert metrics == {"reward/judge_errors": 0.0, "reward/judge_timeouts": 0.0}


def test_the_driver_path_stays_for_plain_rule_rewards_and_the_loop_takes_the_rest(tmp_path):
    path = write_scores(tmp_path)
    assert not uses_reward_loop(loop_config(path, "sync_score"))
    assert not uses_reward_loop(loop_config(None, manager="dapo"))
    assert uses_reward_loop(loop_config(path, "async_score"))
    assert uses_reward_loop(loop_config(path, "sync_score", manager="limit"))
    assert uses_reward_loop(loop_config(path, "sync_score", manager="remote"))
    assert uses_reward_loop(loop_config(path, "sync_score", reward_kwargs={"fallback_score": -1.0}))
    assert uses_reward_loop(loop_config(path, "sync_score", reward={"reward_kwargs": {"fallback_score": 0.0}}))
    importlib_config = loop_config(path, "sync_score")
    importlib_config.reward.reward_manager.source = "importlib"
    assert uses_reward_loop(importlib_config)
    assert get_reward_manager_cls("limit") is get_reward_manager_cls("rate_limited") is RateLimitedRewardManager


def test_limit_keeps_at_most_max_concurrent_calls_in_flight(tmp_path, tiny_tokenizer, batch):
    config = loop_config(write_scores(tmp_path), "counting_judge", "limit", reward={"max_concurrent": 2})
    rm_scores, _, _ = _loop_scores(config, tiny_tokenizer, batch)
    in_flight = get_custom_reward_fn(config).func.__globals__["IN_FLIGHT"]
    # 5 samples, all started at once: never more than 2 inside the judge, and 2 were (measured)
    assert in_flight["max"] == 2
    assert rm_scores.sum().item() == 5.0


def test_a_manager_class_from_a_file(tmp_path, tiny_tokenizer, batch):
    manager_path = tmp_path / "my_manager.py"
    manager_path.write_text(MANAGER_PY)
    config = loop_config(write_scores(tmp_path), "sync_score")
    config.reward.reward_manager.source = "importlib"
    config.reward.reward_manager.module = {"path": str(manager_path), "name": "LengthRewardManager"}
    rm_scores, extra, _ = _loop_scores(config, tiny_tokenizer, batch)
    lengths = batch.batch["attention_mask"][:, 16:].sum(-1)
    assert rm_scores.sum(-1).tolist() == lengths.float().tolist()
    assert extra["length"] == [1] * 5

    config.reward.reward_manager.module.name = "Missing"
    with pytest.raises(AttributeError, match="reward.reward_manager.module.path"):
        resolve_reward_manager_cls(config)


def test_unknown_manager_names_the_key():
    with pytest.raises(ValueError, match=r"Unknown reward manager: nope \(reward.reward_manager.name\)"):
        resolve_reward_manager_cls(loop_config(manager="nope"))
