"""examples/agents_in_your_code: the agent file is plain ``openai`` + standard library, its calculator is safe, and
its ``rollout`` plays the calculator conversation right against hybridrl's real endpoint (the rollout servers are a
scripted stand-in inside this test): tool call → local result → final answer, scored against the ground truth, and
trained as one sample holding exactly the model's tokens."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from config_testlib import compose_config

from hybridrl.agents.openai_agent_loop import OpenAIAgentLoop
from hybridrl.agents.trajectory_samples import samples_from_completions
from hybridrl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from hybridrl.serving.training_endpoint import TrainingEndpoint
from hybridrl.workers.rollout.async_server import TokenOutput

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agents_in_your_code"
AGENT_FILE = EXAMPLE / "calculator_agent.py"
CALL_TEXT = '<tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}}</tool_call>'


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


agent = _load(AGENT_FILE, "calculator_agent")


class ScriptedServers:
    """``AsyncLLMServerManager.generate`` stand-in: reply ``k`` is ``replies[k]`` encoded + EOS, log-prob -0.5."""

    def __init__(self, tokenizer, replies) -> None:
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        text = self.replies[min(len(self.calls) - 1, len(self.replies) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="stop")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _config(model_dir, *extra):
    return compose_config("ppo_trainer", [
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.mode=async",
        "data.return_raw_chat=True", "actor_rollout_ref.rollout.prompt_length=256",
        "actor_rollout_ref.rollout.response_length=256", *extra])


def _row(a: int = 347, b: int = 829) -> dict:
    return agent.question_row(a, b)


def _play(config, tokenizer, replies, row):
    """``agent.rollout`` against a real TrainingEndpoint (uvicorn on 127.0.0.1) → (reward, records, servers)."""
    servers = ScriptedServers(tokenizer, replies)

    async def main():
        endpoint = TrainingEndpoint(config, servers, tokenizer)
        await endpoint.start()
        endpoint.begin("traj-1", {"temperature": 1.0, "seed": 0})
        client = endpoint.client("traj-1", timeout_s=30)
        try:
            reward = await agent.rollout(client, row)
        finally:
            await client.close()
            await asyncio.sleep(0)
        return reward, endpoint.end("traj-1"), endpoint.renderer.continued

    reward, records, continued = asyncio.run(main())
    return reward, records, continued, servers


def test_the_agent_file_imports_only_openai_and_the_standard_library():
    tree = ast.parse(AGENT_FILE.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "hybridrl" not in imported
    assert imported - set(sys.stdlib_module_names) == {"openai"}, imported


def test_the_system_prompt_is_the_one_the_warm_model_learned():
    prepare = _load(ROOT / "examples" / "agent_calculator" / "prepare_data.py", "agent_calculator_prepare_data")
    assert agent.SYSTEM_PROMPT == prepare.SYSTEM_PROMPT
    assert agent.question_row(347, 829)["raw_prompt"] == prepare.rl_row(347, 829, "test", 0)["prompt"]


@pytest.mark.parametrize("expression,result", [
    ("347*829", "287663"), ("7/2", "3.5"), ("(12+30)*7", "294"), ("-7//2", "-4"), ("6/3", "2"), ("2**10", "1024"),
])
def test_the_calculator_computes(expression, result):
    assert agent.calculate(expression) == result


@pytest.mark.parametrize("expression", ["__import__('os').system('true')", "x*2", "2**100000", "1/0", "1+", "abs(-1)"])
def test_the_calculator_refuses_anything_but_arithmetic(expression):
    assert agent.calculate(expression).startswith("Error: ")


def test_a_tool_conversation_is_scored_and_trained_on_the_models_exact_tokens(tokenizer, tiny_model_dir):
    reward, records, continued, servers = _play(_config(tiny_model_dir), tokenizer, [CALL_TEXT, "#### 287663"], _row())
    assert reward == 1.0 and len(records) == 2 and continued == 1
    first, second = records
    assert first.finish_reason == "tool_calls" and second.finish_reason == "stop"
    # the second prompt = the first prompt + the model's own tokens + the tool turn the agent computed locally
    spliced = first.prompt_ids + first.response_ids
    assert second.prompt_ids[: len(spliced)] == spliced
    tool_turn = tokenizer.decode(second.prompt_ids[len(spliced):])
    assert tool_turn == "\n<|im_start|>tool\n287663<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(first.prompt_ids) == (
        f"<|im_start|>system\n{agent.SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nWhat is 347*829?<|im_end|>\n"
        "<|im_start|>assistant\n")
    (sample,) = samples_from_completions(records, reward, response_length=256, metrics=AgentLoopMetrics())
    generated = [t for t, m in zip(sample.response_ids, sample.response_mask) if m == 1]
    assert generated == first.response_ids + second.response_ids
    assert len(servers.calls) == 2


@pytest.mark.parametrize("replies,reward,calls", [
    (["#### 287663"], 1.0, 1),                          # a direct right answer
    (["#### 287664"], 0.0, 1),                          # a direct wrong answer
    ([CALL_TEXT, "#### 287664"], 0.0, 2),               # the tool's result copied wrong
    (["The answer is 287663."], 0.0, 1),                # no '#### n'
    ([CALL_TEXT, CALL_TEXT, CALL_TEXT, "#### 287663"], 0.0, 3),  # out of model turns (3)
])
def test_right_and_wrong_answers_are_scored(tokenizer, tiny_model_dir, replies, reward, calls):
    got, records, _, servers = _play(_config(tiny_model_dir), tokenizer, replies, _row())
    assert got == reward and len(records) == calls == len(servers.calls)


def test_the_agent_leaves_each_turns_length_to_the_training_endpoint(tokenizer, tiny_model_dir):
    """A short rollout.response_length (the smoke test's 48) bounds max_tokens there: the agent asks for none."""
    config = _config(tiny_model_dir, "actor_rollout_ref.rollout.response_length=48")
    reward, records, _, servers = _play(config, tokenizer, ["#### 287663"], _row())
    assert reward == 1.0 and servers.calls[0][2]["max_tokens"] == 48


def test_a_conversation_that_outgrows_the_context_scores_zero(tokenizer, tiny_model_dir):
    """The conversation spends its response budget in the first turn: the next request gets an empty completion
    (finish_reason "length") without reaching the engine, and the agent ends the episode with reward 0."""
    from hybridrl.generation.chat_tokens import ChatTokens

    first_prompt = len(ChatTokens(tokenizer).prompt_ids(_row()["raw_prompt"]))
    call = len(tokenizer.encode(CALL_TEXT, add_special_tokens=False)) + 1
    config = _config(tiny_model_dir, f"actor_rollout_ref.rollout.prompt_length={first_prompt}",
                     f"actor_rollout_ref.rollout.response_length={call + 4}")
    reward, records, _, servers = _play(config, tokenizer, [CALL_TEXT, CALL_TEXT, "#### 287663"], _row())
    assert reward == 0.0 and len(servers.calls) == 1
    assert [r.finish_reason for r in records[1:]] and all(r.response_ids == [] for r in records[1:])
    assert all(r.finish_reason == "length" for r in records[1:])


def test_a_bad_tool_call_gets_an_error_result_and_the_conversation_goes_on(tokenizer, tiny_model_dir):
    bad_call = '<tool_call>{"name": "calculator", "arguments": {"expression": "open(1)"}}</tool_call>'
    reward, records, _, _ = _play(_config(tiny_model_dir), tokenizer, [bad_call, "#### 287663"], _row())
    assert reward == 1.0
    assert "<|im_start|>tool\nError: " in tokenizer.decode(records[1].prompt_ids)


def test_the_openai_agent_loop_runs_the_example_file(tokenizer, tiny_model_dir):
    config = _config(tiny_model_dir, f"actor_rollout_ref.rollout.agent.custom_rollout_function.path={AGENT_FILE}")
    servers = ScriptedServers(tokenizer, [CALL_TEXT, "#### 287663"])
    loop = OpenAIAgentLoop(trainer_config=config, server_manager=servers, tokenizer=tokenizer)
    (sample,) = asyncio.run(loop.run({"temperature": 1.0, "seed": 3}, **_row()))
    assert sample.extra_fields["reward_scores"] == {len(sample.response_ids) - 1: 1.0}
    assert sample.metrics.counters["completions"] == 2
    masked_out = tokenizer.decode([t for t, m in zip(sample.response_ids, sample.response_mask) if m == 0])
    assert masked_out == "\n<|im_start|>tool\n287663<|im_end|>\n<|im_start|>assistant\n"


def test_prepare_data_routes_the_calculator_rows_to_the_openai_agent(tmp_path):
    prepare = _load(ROOT / "examples" / "agent_calculator" / "prepare_data.py", "agent_calculator_prepare_data")
    prepare.prepare(tmp_path / "data", seed=0, train_size=4, test_size=2, sft_size=2, tool_fraction=0.5)
    route = _load(EXAMPLE / "prepare_data.py", "agents_in_your_code_prepare_data")
    route.route_to_openai_agent(tmp_path / "data", tmp_path / "routed")
    for split, size in (("train", 4), ("test", 2)):
        before, after = (pq.read_table(tmp_path / d / f"{split}.parquet").to_pylist() for d in ("data", "routed"))
        assert [r["agent_name"] for r in after] == ["openai_agent"] * size
        assert [{**r, "agent_name": None} for r in after] == [{**r, "agent_name": None} for r in before]
    with pytest.raises(FileNotFoundError, match="prepare_data.py"):
        route.route_to_openai_agent(tmp_path / "missing", tmp_path / "out")


def test_the_tool_schema_matches_the_calculator_task_tool_yaml():
    import yaml

    tools = yaml.safe_load((ROOT / "examples" / "agent_calculator" / "tool_config.yaml").read_text())["tools"]
    assert json.dumps(agent.CALCULATOR_TOOL, sort_keys=True) == json.dumps(tools[0]["tool_schema"], sort_keys=True)


def _main_ppo_overrides(script: Path) -> list[str]:
    """The ``key=value`` words of the script's ``main_ppo`` command, shell variables filled in."""
    import re
    import shlex

    text = re.sub(r"\\\n", " ", script.read_text())
    command = next(line for line in text.splitlines() if "hybridrl.trainer.main_ppo" in line)
    values = {"DATA": "/data/agents_in_your_code", "MODEL": "/models/Qwen2.5-0.5B-Instruct", "HERE": str(EXAMPLE)}
    command = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), "1"), command)
    words = shlex.split(command)
    return [w for w in words[words.index("hybridrl.trainer.main_ppo") + 1 :] if "=" in w]


def test_gpu_script_overrides_are_keys_of_the_config_tree():
    import os
    import subprocess

    import yaml

    overrides = _main_ppo_overrides(EXAMPLE / "run_gpu.sh")
    args = dict(o.split("=", 1) for o in overrides)
    assert args["actor_rollout_ref.rollout.name"] == "vllm" and args["actor_rollout_ref.rollout.mode"] == "async"
    assert args["data.return_raw_chat"] == "True"
    proc = subprocess.run([sys.executable, "-m", "hybridrl.trainer.main_ppo", *overrides, "--cfg", "job"],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    function = yaml.safe_load(proc.stdout)["actor_rollout_ref"]["rollout"]["agent"]["custom_rollout_function"]
    assert function["path"] == str(AGENT_FILE) and function["name"] == "rollout"


# ----------------------------------------------------------------------------- standalone serving (no continuation)


@pytest.fixture(scope="module")
def tools_tokenizer(tiny_model_dir, tmp_path_factory):
    """The tiny model with the example's tool-rendering template (tool_template.py)."""
    from transformers import AutoTokenizer

    template = _load(EXAMPLE / "tool_template.py", "agents_in_your_code_tool_template")
    out = template.with_tool_template(tiny_model_dir, tmp_path_factory.mktemp("tools_model"))
    return AutoTokenizer.from_pretrained(out)


def test_the_tool_template_renders_the_sft_demonstrations_as_the_tiny_template_does(tokenizer, tools_tokenizer):
    prepare = _load(ROOT / "examples" / "agent_calculator" / "prepare_data.py", "agent_calculator_prepare_data")
    sft = prepare.sft_conversation(347, 829, use_tool=True, rng=None)
    assert sft[2]["content"] == CALL_TEXT
    structured = [*sft[:2], {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "calculator", "arguments": {"expression": "347*829"}}}]}, *sft[3:]]
    as_sft = tokenizer.apply_chat_template(sft, tokenize=False)
    assert tools_tokenizer.apply_chat_template(structured, tokenize=False) == as_sft
    assert tools_tokenizer.apply_chat_template(sft, tokenize=False) == as_sft


def test_rollout_against_a_served_model_rerenders_the_tool_call_it_replays(tools_tokenizer):
    """``python -m hybridrl.serve``'s app (build_openai_app, prompts rendered from the messages' text)."""
    from hybridrl.serving import ServeLimits, build_openai_app

    servers = ScriptedServers(tools_tokenizer, [CALL_TEXT, "#### 287663"])
    limits = ServeLimits(max_tokens=128, max_prompt_tokens=1000, max_request_bytes=20_000, max_n=4)
    app = build_openai_app(servers.generate, tools_tokenizer, model_name="calc", limits=limits)

    async def main():
        import httpx
        import openai

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve.test") as http_client:
            client = openai.AsyncOpenAI(base_url="http://serve.test/v1", api_key="x", http_client=http_client,
                                        max_retries=0)
            return await agent.rollout(client, _row(), model="calc", max_tokens=64)

    assert asyncio.run(main()) == 1.0
    first, second = servers.calls[0][1], servers.calls[1][1]
    assert tools_tokenizer.decode(second) == tools_tokenizer.decode(first) + CALL_TEXT + (
        "<|im_end|>\n<|im_start|>tool\n287663<|im_end|>\n<|im_start|>assistant\n")
    assert servers.calls[0][2]["max_tokens"] == 64
