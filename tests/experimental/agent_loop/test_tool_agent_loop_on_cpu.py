"""``tool_agent`` against a scripted server (the model's turns are fixed text, tokenized with the real tokenizer):
real ChatTokens, hermes parser, calculator tool, ToolExecutor and the GSM8K interaction."""

from __future__ import annotations

import asyncio
import time

import pytest
from config_testlib import compose_config

from hybridrl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from hybridrl.interactions.gsm8k_interaction import Gsm8kInteraction
from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.calculator_tool import CalculatorTool
from hybridrl.tools.schemas import OpenAIFunctionToolSchema
from hybridrl.workers.rollout.async_server import TokenOutput

CALL = '<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


class ScriptedServer:
    """Answers each generate with the next scripted assistant text + EOS (a fake inside this unit test)."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.prompts = tokenizer, list(turns), []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[: sampling_params["max_tokens"]]
        stop = "stop" if ids[-1] == self.tokenizer.eos_token_id else "length"
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason=stop)


class SlowTool(BaseTool):
    """Blocks its thread (time.sleep), then answers; with a 0.2 s timeout in its config it times out."""

    async def execute(self, instance_id, parameters, **kwargs):
        time.sleep(float(parameters.get("seconds", 1.0)))
        return "done", 0.0, {}


class RaisingTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        raise RuntimeError("backend down")


def _schema(name: str) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
        "name": name, "description": name, "parameters": {"type": "object", "properties": {}, "required": []}}})


def _loop(tokenizer, turns, *extra, tools=None, interactions=None):
    config = compose_config("ppo_trainer", [
        "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=True",
        "actor_rollout_ref.rollout.response_length=700", "actor_rollout_ref.rollout.prompt_length=256",
        "data.return_raw_chat=True", *extra])
    if tools is None:
        tools = {"calculator": CalculatorTool({}, None)}
    server = ScriptedServer(tokenizer, turns)
    loop = ToolAgentLoop(trainer_config=config, server_manager=server, tokenizer=tokenizer, tools=tools,
                         interactions=interactions or {})
    return loop, server


def _run(loop, **row):
    row.setdefault("raw_prompt", [{"role": "user", "content": "what is 12 times 7"}])
    return asyncio.run(loop.run({"temperature": 1.0, "logprobs": True}, **row))


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_tool_call_then_answer_keeps_exact_tokens(tokenizer):
    turns = [CALL.format(name="calculator", args='{"expression": "12*7"}'), "#### 84"]
    loop, server = _loop(tokenizer, turns)
    out = _run(loop)
    assert out.num_turns == 4  # assistant, tool, assistant + 1
    assert out.metrics.counters["tool_calls"] == 1 and out.metrics.tools["calculator"]["calls"] == 1
    # the second generation's prompt is exactly the first prompt + the model's tokens + the tool turn's tokens
    assert server.prompts[1] == out.prompt_ids + out.response_ids[: len(server.prompts[1]) - len(out.prompt_ids)]
    text = tokenizer.decode(out.response_ids)
    assert "84" in tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert text.endswith("#### 84<|im_end|>")
    generated = [t for t, m in zip(out.response_ids, out.response_mask) if m == 1]
    expected = (tokenizer.encode(turns[0], add_special_tokens=False) + [tokenizer.eos_token_id]
                + tokenizer.encode(turns[1], add_special_tokens=False) + [tokenizer.eos_token_id])
    assert generated == expected
    assert [lp for lp, m in zip(out.response_logprobs, out.response_mask) if m == 1] == [-0.5] * len(expected)
    assert out.metrics.counters["tokenization_mismatch"] == 0.0  # strict re-render agrees


def test_parallel_calls_are_capped_and_errors_become_tool_messages(tokenizer):
    calls = "".join([CALL.format(name="calculator", args='{"expression": "1/0"}'),
                     CALL.format(name="nope", args="{}"),
                     CALL.format(name="calculator", args='{"expression": "2+2"}')])
    loop, _ = _loop(tokenizer, [calls, "done"], "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=2")
    out = _run(loop)
    tool_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "Error" in tool_text and "unknown tool 'nope'" in tool_text
    assert "4" not in tool_text.replace("<|im_start|>", "")  # the third call was beyond max_parallel_calls
    assert "zero" in tool_text  # the calculator answers 1/0 with its own error text (a normal tool response)
    assert out.metrics.counters["tool_errors"] == 1  # the unknown tool


def test_malformed_call_is_a_counted_parse_failure(tokenizer):
    loop, server = _loop(tokenizer, ['<tool_call>{"name": "calculator", "arguments": </tool_call>'])
    out = _run(loop)
    assert out.metrics.counters["parse_failures"] == 1
    assert out.num_turns == 2 and len(server.prompts) == 1


def test_slow_and_raising_tools_do_not_crash_or_stall(tokenizer):
    tools = {"slow": SlowTool({"timeout": 0.2}, _schema("slow")), "broken": RaisingTool({}, _schema("broken"))}
    turns = [CALL.format(name="slow", args='{"seconds": 2}') + CALL.format(name="broken", args="{}"), "ok"]
    loop, _ = _loop(tokenizer, turns, "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=2", tools=tools)
    start = time.perf_counter()
    out = _run(loop)
    assert time.perf_counter() - start < 1.5  # the 2 s tool was cut off at its 0.2 s timeout
    tool_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "backend down" in tool_text and "slow" in tool_text
    assert out.metrics.tools["slow"]["errors"] == 1 and out.metrics.tools["broken"]["errors"] == 1


def test_turn_and_length_budgets_terminate(tokenizer):
    call = CALL.format(name="calculator", args='{"expression": "1+1"}')
    loop, server = _loop(tokenizer, [call] * 10, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3")
    out = _run(loop)
    assert len(server.prompts) == 3 and out.metrics.counters["assistant_turns"] == 3
    loop, server = _loop(tokenizer, [call] * 50, "actor_rollout_ref.rollout.response_length=120")
    out = _run(loop)
    assert len(out.response_ids) <= 120 and len(server.prompts) < 50


def test_interaction_answers_as_the_user_until_correct(tokenizer):
    interactions = {"gsm8k": Gsm8kInteraction({"name": "gsm8k"})}
    loop, server = _loop(tokenizer, ["#### 80", "#### 84"], tools={}, interactions=interactions)
    out = _run(loop, interaction_kwargs={"name": "gsm8k", "ground_truth": "84"})
    assert out.extra_fields["turn_scores"] == [0.0, 1.0]
    assert len(server.prompts) == 2 and out.num_turns == 4
    user_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "<|im_start|>user" in user_text


def test_stateful_tool_instance_lives_for_the_conversation_and_is_rewarded(tokenizer):
    from hybridrl.tools.gsm8k_tool import Gsm8kTool

    schema = {"type": "function", "function": {"name": "calc_gsm8k_reward", "description": "check the answer",
              "parameters": {"type": "object", "properties": {"answer": {"type": "string", "description": "the answer"}},
                             "required": ["answer"]}}}
    tool = Gsm8kTool({}, schema)
    turns = [CALL.format(name=tool.name, args='{"answer": "80"}'), CALL.format(name=tool.name, args='{"answer": "84"}'),
             "#### 84"]
    loop, _ = _loop(tokenizer, turns, tools={tool.name: tool})
    out = _run(loop, tools_kwargs={tool.name: {"create_kwargs": {"ground_truth": "84"}}})
    assert out.extra_fields["tool_final_rewards"] == {tool.name: 1.0}
    assert len(out.extra_fields["tool_rewards"]) == 2
    assert tool._instance_dict == {}  # released


# Each format's call of calculator(expression="12*7"), as its model family writes it (see
# tests/generation/test_tool_formats_on_cpu.py for the renderings and their sources).
FORMAT_CALLS = {
    "qwen3_coder": "<tool_call>\n<function=calculator>\n<parameter=expression>\n12*7\n</parameter>\n</function>\n"
    "</tool_call>",
    "gpt-oss": '<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{"expression": "12*7"}<|call|>',
    "glm": "<tool_call>calculator\n<arg_key>expression</arg_key>\n<arg_value>12*7</arg_value>\n</tool_call>",
    "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>functions.calculator:0<|tool_call_argument_begin|>"
    '{"expression": "12*7"}<|tool_call_end|><|tool_calls_section_end|>',
    "deepseek_v4": '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="calculator">\n<｜DSML｜parameter name="expression" '
    'string="true">12*7</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    "gemma4": '<|tool_call>call:calculator{expression:<|"|>12*7<|"|>}<tool_call|>',
    "seed": "<seed:tool_call>\n<function=calculator>\n<parameter=expression>12*7</parameter>\n</function>\n"
    "</seed:tool_call>",
    "minimax": '<minimax:tool_call>\n<invoke name="calculator">\n<parameter name="expression">12*7</parameter>\n'
    "</invoke>\n</minimax:tool_call>",
}


def test_each_format_round_trips_through_the_tool_call_path(tokenizer):
    """multi_turn.format picks the parser: the model's call is parsed, run, and its answer fed back (one config
    composed, the format set per loop: composing is most of the cost)."""
    loop, _ = _loop(tokenizer, [])
    for name, call in sorted(FORMAT_CALLS.items()):
        config = loop.config.copy()
        config.actor_rollout_ref.rollout.multi_turn.format = name
        server = ScriptedServer(tokenizer, [call, "#### 84"])
        tools = {"calculator": CalculatorTool({}, None)}
        out = _run(ToolAgentLoop(trainer_config=config, server_manager=server, tokenizer=tokenizer, tools=tools,
                                 interactions={}))
        assert out.metrics.counters["tool_calls"] == 1 and out.metrics.counters["parse_failures"] == 0, name
        assert out.metrics.tools["calculator"]["calls"] == 1 and len(server.prompts) == 2, name
        assert "84" in tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0]), name


def test_the_formats_stop_tokens_are_asked_for_each_turn(tokenizer):
    """gemma4 stops on ``<tool_call|>`` (verl adds a parser's stop_token_ids to the request); hermes adds none."""
    import copy

    loop, _ = _loop(tokenizer, [])
    with_token = copy.deepcopy(tokenizer)
    with_token.add_special_tokens({"additional_special_tokens": ["<tool_call|>"]})
    stop = with_token.convert_tokens_to_ids("<tool_call|>")
    gemma = loop.config.copy()
    gemma.actor_rollout_ref.rollout.multi_turn.format = "gemma4"
    gemma_loop = ToolAgentLoop(trainer_config=gemma, server_manager=None, tokenizer=with_token, tools={},
                               interactions={})
    assert gemma_loop._turn_sampling_params({"stop_token_ids": [7]}, 5) == {"stop_token_ids": [7, stop], "max_tokens": 5}
    assert "stop_token_ids" not in loop._turn_sampling_params({"temperature": 1.0}, 5)
