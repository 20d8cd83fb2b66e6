"""The shipped tools: Gsm8kTool (verl's semantics), the AST calculator, the sandboxed code interpreter."""

import asyncio

import pytest

from hybridrl.tools.calculator_tool import CalculatorError, CalculatorTool, evaluate_expression, format_number
from hybridrl.tools.code_interpreter_tool import CodeInterpreterTool, sandbox_limits
from hybridrl.tools.gsm8k_tool import Gsm8kTool
from hybridrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from hybridrl.utils.reward_score.sandbox import SandboxLimits

GSM8K_SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {"type": "function", "function": {"name": "calc_gsm8k_reward", "description": "d",
     "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}
)  # fmt: skip


def run(coroutine):
    return asyncio.run(coroutine)


# ---------------------------------------------------------------------------- Gsm8kTool


def test_gsm8k_tool_scores_and_penalises_non_improving_submissions():
    tool = Gsm8kTool({"type": "native"}, GSM8K_SCHEMA)
    instance_id, created = run(tool.create("conv-1", ground_truth="72"))
    assert (instance_id, created) == ("conv-1", ToolResponse())
    # wrong answer: reward 0 does not beat the initial 0.0 → penalty -0.05
    assert run(tool.execute("conv-1", {"answer": "70"})) == (
        ToolResponse(text="Current parsed answer='70' reward=0.0"),
        -0.05,
        {},
    )
    # right answer (an int is turned into a string; flexible mode takes the last number): improves → 0.0
    assert run(tool.execute("conv-1", {"answer": 72})) == (
        ToolResponse(text="Current parsed answer='72' reward=1.0"),
        0.0,
        {},
    )
    # resubmitting the same right answer does not improve → penalty again
    assert run(tool.execute("conv-1", {"answer": "#### 72"}))[1] == -0.05
    assert run(tool.calc_reward("conv-1")) == 1.0
    run(tool.release("conv-1"))
    assert "conv-1" not in tool._instance_dict


def test_gsm8k_tool_takes_verl_0_9_create_kwargs():
    tool = Gsm8kTool({}, GSM8K_SCHEMA)
    instance_id, _ = run(tool.create(create_kwargs={"ground_truth": "5"}))
    assert len(instance_id) == 36
    assert run(tool.execute(instance_id, {"answer": "the answer is 5"}))[0].text.endswith("reward=1.0")


# ---------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    "expression, value",
    [
        ("(12 + 30) * 7", 294),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),  # floor division rounds toward -inf, as in Python
        ("-7 % 3", 2),
        ("2 ** 10", 1024),
        ("2 ** -2", 0.25),
        ("-(3 - 5) * +4", 8),
        ("1_000 * 3", 3000),
        ("  1.5e3 + 1 ", 1501.0),
    ],
)
def test_calculator_values(expression, value):
    result = evaluate_expression(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    "expression, reason",
    [
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("__import__('os').system('true')", "is not allowed"),
        ("x + 1", "'x' is not allowed"),
        ("2 ^ 3", "write a \\*\\* b"),
        ("(-8) ** 0.5", "not a real number"),
        ("9 ** 9 ** 9", "result too large"),
        ("10.0 ** 400", "result too large"),
        ("2 ** 5000 * 2 ** 5001", "result too large"),
        ("1 +", "not an arithmetic expression"),
        ("'a' * 3", "is not allowed"),
        ("True + 1", "is not allowed"),
        ("1" * 600, "longer than 512 characters"),
    ],
)
def test_calculator_refusals(expression, reason):
    with pytest.raises(CalculatorError, match=reason):
        evaluate_expression(expression)


def test_number_format():
    assert [format_number(v) for v in (42, 2.0, 3.5, 1 / 3, -0.0, 1e20)] == [
        "42",
        "2",
        "3.5",
        "0.333333333333",
        "0",
        "1e+20",
    ]


def test_calculator_tool_responses():
    tool = CalculatorTool()
    assert tool.name == "calculator" and tool.tool_schema.function.parameters.required == ["expression"]
    assert run(tool.execute("i", {"expression": "6 * 7"})) == (ToolResponse(text="42"), 0.0, {"invalid_expression": 0})
    assert run(tool.execute("i", {"expression": "6 / 0"})) == (
        ToolResponse(text="Error: division by zero"), 0.0, {"invalid_expression": 1})  # fmt: skip
    assert run(tool.execute("i", {"expr": "1"}))[0].text == "Error: give the expression as a string"


# ---------------------------------------------------------------------------- code interpreter


def test_code_interpreter_limits_from_config():
    assert sandbox_limits({"type": "native"}) == SandboxLimits()
    limits = sandbox_limits({"default_timeout": 3, "memory_limit_mb": 256, "cpu_time_s": 2, "timeout": 9})
    assert (limits.wall_time_s, limits.memory_mb, limits.cpu_time_s) == (3, 256, 2)


def test_code_interpreter_runs_in_the_sandbox():
    tool = CodeInterpreterTool({"default_timeout": 5})
    response, reward, metrics = run(tool.execute("i", {"code": "print(6 * 7)"}))
    assert (response.text, reward, metrics) == ("42", 0.0, {"code_ok": 1, "code_timed_out": 0})
    response, _, metrics = run(tool.execute("i", {"code": "import sys\nprint('partial')\nsys.exit('boom')"}))
    assert response.text == "partial\nboom\n[exit code 1]" and metrics["code_ok"] == 0
    assert run(tool.execute("i", {"code": "x = 1"}))[0].text == "[no output]"


def test_code_interpreter_times_out():
    tool = CodeInterpreterTool({"default_timeout": 0.5})
    response, _, metrics = run(tool.execute("i", {"code": "while True: pass"}))
    assert response.text == "[timed out after 0.5 s]" and metrics == {"code_ok": 0, "code_timed_out": 1}
