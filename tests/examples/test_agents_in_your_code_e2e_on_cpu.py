"""examples/agents_in_your_code end to end on tiny sizes (CI smoke): calculator task data → a random digit-tokenizer
model → 2 GRPO steps of calculator_agent.py through ``run_cpu.sh`` (main_ppo, server mode, the openai_agent loop and
its OpenAI-compatible endpoint). Asserts the plotted metrics exist and are finite and that no trajectory failed; the
learning itself is measured in the example's README (a random model never answers right)."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agents_in_your_code"
TASK = ROOT / "examples" / "agent_calculator"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_grpo_steps_of_the_openai_agent_log_finite_reward_and_completions(calculator_model_dir, tmp_path):
    _load(TASK / "prepare_data.py", "agent_calculator_prepare_data").prepare(
        tmp_path / "data", seed=0, train_size=8, test_size=4, sft_size=4, tool_fraction=0.5)
    env = {**os.environ, "STEPS": "2", "TEST_FREQ": "2", "MODEL": str(calculator_model_dir), "NAME": "smoke",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    overrides = ["data.train_batch_size=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                 "data.max_response_length=48", "trainer.val_before_train=False"]
    proc = subprocess.run(["bash", str(EXAMPLE / "run_cpu.sh"), str(tmp_path), *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    plot = _load(EXAMPLE / "plot.py", "agents_in_your_code_plot")
    steps = plot.read_metrics(tmp_path / "metrics" / "smoke.jsonl")
    assert [s for s, _ in plot.curve(steps, plot.TRAIN_REWARD)] == [1, 2]
    for step in (1, 2):
        row = steps[step]
        for key in ("critic/score/mean", "agent_loop/completions", "actor/pg_loss", "num_turns/mean"):
            assert key in row and math.isfinite(row[key]), (step, key, sorted(row))
        assert 0.0 <= row["critic/score/mean"] <= 1.0
        assert 1.0 <= row["agent_loop/completions"] <= 3.0  # the agent asks the model 1 to 3 times
        assert row.get("agent_loop/failed_trajectories", 0) == 0, row  # the agent never raised nor timed out
    val_key = plot.val_reward_key(steps)
    assert val_key is not None and math.isfinite(steps[2][val_key]), sorted(steps[2])
    plot.plot(steps, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert (tmp_path / "tensorboard" / "smoke").is_dir()
