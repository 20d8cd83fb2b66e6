"""``main_ppo`` in server mode on vLLM: GRPO with ``rollout.mode=async``, multi-turn tool calling on, a verl tool
YAML. (The same run on the hf engine is the agent_calculator example's CI test:
tests/examples/test_agent_calculator_e2e_on_cpu.py.)

The engine serves the agent loops from inside the 2 FSDP workers; the trainer sees an ordinary batch.
(The tiny random model rarely writes a well-formed tool call; tool execution itself is covered by the agent-loop
tests and by the calculator demo's test, whose warmed model does call the tool.)
"""

from __future__ import annotations

import importlib.util
import math

import pytest

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow

TOOL_YAML = """
tools:
  - class_name: hybridrl.tools.calculator_tool.CalculatorTool
    config:
      type: native
    tool_schema:
      type: function
      function:
        name: calculator
        description: Evaluate an arithmetic expression.
        parameters:
          type: object
          properties:
            expression:
              type: string
              description: the expression, e.g. 12*7
          required: [expression]
"""


def _agent_args(model_dir: str, data_dir: str, tmp_path, **overrides) -> list[str]:
    tool_config = tmp_path / "tools.yaml"
    tool_config.write_text(TOOL_YAML)
    return grpo_args(model_dir, data_dir, str(tmp_path / "ckpt"), **{
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.multi_turn.tool_config_path": str(tool_config),
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 3,
        "actor_rollout_ref.rollout.agent.num_workers": 2,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "data.return_raw_chat": True,
        "data.max_response_length": 24,
        "trainer.rollout_probs_diff_max_bound": 0.05,  # a stale or mismatched engine fails the run
        "trainer.total_training_steps": 2, "trainer.test_freq": 2, "trainer.save_freq": -1,
        **overrides,
    })


def _assert_agent_metrics(metrics: dict[int, dict[str, float]]) -> None:
    for step in (1, 2):
        row = metrics[step]
        for key in ("num_turns/mean", "agent_loop/tool_call_rate", "agent_loop/parse_failures",
                    "timing_s/agent_loop/generate_sequences/mean", "critic/score/mean", "actor/pg_loss"):
            assert key in row and math.isfinite(row[key]), (step, key, sorted(row))
        assert row["num_turns/min"] >= 2
        assert row["training/rollout_probs_diff_max"] < 0.05, row
    assert metrics[2]["rollout/weight_sync_verified_tensors"] > 0  # step 2 serves the weights of step 1's update


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (use .venv-vllm)")
def test_grpo_server_mode_on_vllm_end_to_end(tiny_model_dir, arithmetic_data_dir, tmp_path):
    metrics_file = str(tmp_path / "metrics.jsonl")
    args = _agent_args(tiny_model_dir, arithmetic_data_dir, tmp_path, **{
        "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.enforce_eager": True,
        "trainer.test_freq": -1,
    })
    proc = run_main_ppo(args, metrics_file, timeout=600, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, failure_report(proc)
    _assert_agent_metrics(read_metrics(metrics_file))
