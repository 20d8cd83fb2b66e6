"""examples/agent_calculator end to end on tiny sizes (CI smoke): data → random digit-tokenizer model → 2 GRPO steps
through ``run_cpu.sh`` (server mode, multi-turn, the calculator tool from a verl tool YAML). Asserts the plotted
metrics exist and are finite, and — this run is also the CI test of ``main_ppo`` in server mode with tools — the
agent-loop metrics, the engine's log-probs against the trainer's (``rollout_probs_diff_max_bound``: a stale or
mismatched engine fails the run) and the weight sync. The learning itself is measured in the example's README (a
random model never calls the tool)."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent_calculator"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"agent_calculator_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_grpo_steps_with_the_calculator_tool_log_finite_reward_and_tool_metrics(calculator_model_dir, tmp_path):
    _load("prepare_data").prepare(tmp_path / "data", seed=0, train_size=16, test_size=8, sft_size=8, tool_fraction=0.5)
    env = {**os.environ, "STEPS": "2", "TEST_FREQ": "2", "MODEL": str(calculator_model_dir), "NAME": "smoke",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    overrides = ["data.train_batch_size=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                 "data.max_response_length=48", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
                 "actor_rollout_ref.rollout.calculate_log_probs=True", "trainer.rollout_probs_diff_max_bound=0.05"]
    proc = subprocess.run(["bash", str(EXAMPLE / "run_cpu.sh"), str(tmp_path), *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    plot = _load("plot")
    scalars = plot.read_scalars(tmp_path / "tensorboard" / "smoke")
    for tag in plot.CURVES:
        values = [value for _, value in scalars[tag]]
        assert values and all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values), (tag, values)
    assert [step for step, _ in scalars[plot.TRAIN_REWARD]] == [1, 2]
    assert [step for step, _ in scalars[plot.VAL_REWARD]] == [0, 2]  # before training and at the last step
    assert "num_turns/mean" in scalars
    for tag in ("num_turns/mean", "agent_loop/tool_call_rate", "agent_loop/parse_failures",
                "timing_s/agent_loop/generate_sequences/mean", "critic/score/mean", "actor/pg_loss"):
        assert [step for step, _ in scalars[tag]] == [1, 2] and all(math.isfinite(v) for _, v in scalars[tag]), tag
    assert all(value >= 2 for _, value in scalars["num_turns/min"])  # every trajectory is multi-turn
    assert all(value < 0.05 for _, value in scalars["training/rollout_probs_diff_max"])
    assert dict(scalars["rollout/weight_sync_verified_tensors"])[2] > 0  # step 2 serves step 1's update
    plot.plot({"smoke": scalars}, None, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
