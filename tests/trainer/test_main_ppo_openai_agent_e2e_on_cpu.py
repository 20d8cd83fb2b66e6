"""``main_ppo`` training an agent written only with the ``openai`` package: 2 GRPO steps on the tiny
model through each agent-loop worker's OpenAI-compatible endpoint. Some rows' agents raise, some hang past the
per-trajectory timeout: the steps complete and both are counted."""

from __future__ import annotations

import math

import pytest

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow

AGENT = '''
import asyncio

async def rollout(client, row):
    """Two turns: answer, then answer again after a nudge; reward = share of digits in the last answer."""
    index = row["extra_info"]["index"]
    if index % 8 == 3:
        raise RuntimeError("this agent crashes on purpose")
    if index % 8 == 5:
        await asyncio.sleep(3600)  # hangs: cut off by custom_rollout_function.timeout_s
    messages = list(row["raw_prompt"])
    first = await client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "again, digits only"}]
    second = await client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
    text = (second.choices[0].message.content or "").replace(" ", "")
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)
'''


def test_grpo_trains_an_openai_client_agent(tiny_model_dir, arithmetic_data_dir, tmp_path):
    agent = tmp_path / "my_agent.py"
    agent.write_text(AGENT)
    metrics_file = str(tmp_path / "metrics.jsonl")
    args = grpo_args(tiny_model_dir, arithmetic_data_dir, str(tmp_path / "ckpt"), **{
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.agent.custom_rollout_function.path": str(agent),
        "actor_rollout_ref.rollout.agent.custom_rollout_function.timeout_s": 4,  # each step waits it out once
        "actor_rollout_ref.rollout.agent.num_workers": 2,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "data.return_raw_chat": True,
        "data.max_response_length": 48,
        "trainer.rollout_probs_diff_max_bound": 0.05,
        "trainer.total_training_steps": 2, "trainer.test_freq": -1, "trainer.save_freq": -1,
        "trainer.val_before_train": False,
    })
    proc = run_main_ppo(args, metrics_file, timeout=900)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    for step in (1, 2):
        row = metrics[step]
        for key in ("critic/score/mean", "actor/pg_loss", "agent_loop/completions", "num_turns/mean"):
            assert key in row and math.isfinite(row[key]), (step, key, sorted(row))
        assert row["agent_loop/trajectory_errors"] > 0 and row["agent_loop/trajectory_timeouts"] > 0, row
        assert row["agent_loop/completions"] > 1  # the working agents made two completions each
        assert row["training/rollout_probs_diff_max"] < 0.05, row
    assert metrics[2]["actor/grad_norm"] > 0
