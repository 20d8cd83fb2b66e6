"""The reward loop on Ray: ``RewardLoopManager`` splits a batch over its reward workers (started on first use, at
most one per sample), its scores equal the driver manager's, and ``remote`` scores in other processes."""

import os
import time

import pytest
import torch
from reward_loop_testlib import loop_config, write_scores
from rm_testlib import make_batch

from hybridrl.experimental.reward_loop import RewardLoopManager
from hybridrl.trainer.ppo.reward import load_reward_manager

pytestmark = pytest.mark.slow


def _batch(tokenizer, n):
    return make_batch(
        tokenizer,
        [f"What is {i} + 1?" for i in range(n)],
        [str(i + 1 if i % 2 else i) for i in range(n)],
        [str(i + 1) for i in range(n)],
        ["arithmetic"] * n,
    )


def _with_tokenizer(config, model_dir):
    config.actor_rollout_ref = {"model": {"path": model_dir, "tokenizer_path": None, "trust_remote_code": False}}
    return config


def test_workers_split_the_batch_and_score_as_the_driver(ray_cluster, tmp_path, tiny_model_dir, tiny_tokenizer):
    path = write_scores(tmp_path)
    config = _with_tokenizer(loop_config(path, "async_score", reward_kwargs={"fallback_score": 0.0}), tiny_model_dir)
    manager = load_reward_manager(config, tiny_tokenizer, num_examine=0)
    assert isinstance(manager, RewardLoopManager)

    one = _batch(tiny_tokenizer, 1)
    start = time.perf_counter()
    manager(one)
    first_call = time.perf_counter() - start
    assert len(manager.reward_loop_workers) == 1  # a 1-sample batch starts one worker, not reward.num_workers

    batch = _batch(tiny_tokenizer, 5)
    out = manager.compute_rm_score(batch)
    assert len(manager.reward_loop_workers) == 2  # reward.num_workers = 2
    expected = load_reward_manager(loop_config(path, "sync_score"), tiny_tokenizer, num_examine=0)(batch)
    torch.testing.assert_close(out.batch["rm_scores"], expected, rtol=0, atol=0)
    assert out.batch["rm_scores"].sum().item() == 2.0  # rows 1 and 3 answer right (i + 1)
    assert out.meta_info["reward_metrics"] == {"reward/judge_errors": 0.0, "reward/judge_timeouts": 0.0}
    assert list(out.non_tensor_batch["acc"]) == expected.sum(-1).tolist()
    print(f"first call with one worker started: {first_call:.2f} s")


def test_remote_scores_in_other_processes(ray_cluster, tmp_path, tiny_model_dir, tiny_tokenizer):
    config = _with_tokenizer(loop_config(write_scores(tmp_path), "pid_score", manager="remote"), tiny_model_dir)
    config.reward.num_workers = 1  # one reward worker with one scoring process (each process costs seconds here)
    manager = RewardLoopManager(config)
    result = manager(_batch(tiny_tokenizer, 4), return_dict=True)
    assert result["reward_tensor"].sum().item() == 4.0
    assert result["reward_extra_info"]["judge_error"] == [False] * 4
    pids = set(result["reward_extra_info"]["pid"])  # scored in the RewardComputeWorker processes
    loop_worker_pid = ray_cluster.get(manager.reward_loop_workers[0].__ray_call__.remote(lambda self: os.getpid()))
    assert not pids & {os.getpid(), loop_worker_pid}
