"""examples/agent_calculator: the data files, the reward function, the digit tokenizer and the GPU script's keys."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent_calculator"

TOOL_PATH_RESPONSE = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}}</tool_call>\n'
    "tool\n287663\nassistant\n#### 287663"
)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"agent_calculator_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    prepare_data = _load("prepare_data")
    out = tmp_path_factory.mktemp("agent_calculator_data")
    return prepare_data.prepare(out, seed=3, train_size=40, test_size=10, sft_size=200, tool_fraction=0.3)


# ----------------------------------------------------------------------------- data


def test_rl_rows_follow_verls_schema_and_hold_the_product(data_dir):
    rows = pq.read_table(data_dir / "train.parquet").to_pylist()
    assert len(rows) == 40
    row = rows[0]
    assert row["data_source"] == "agent_calculator" and row["agent_name"] == "tool_agent"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    a, b = map(int, re.fullmatch(r"What is (\d+)\*(\d+)\?", row["prompt"][1]["content"]).groups())
    assert 317 <= a <= 999 and 317 <= b <= 999
    assert row["reward_model"] == {"style": "rule", "ground_truth": str(a * b)}
    assert len(row["reward_model"]["ground_truth"]) == 6  # 317 * 317 = 100489: always six digits
    assert row["extra_info"]["index"] == 0 and row["extra_info"]["split"] == "train"
    assert row["extra_info"]["tools_kwargs"] == {"calculator": {"create_kwargs": {"ground_truth": str(a * b)}}}


def test_test_questions_are_disjoint_from_rl_and_sft_questions(data_dir):
    def questions(name: str, column: str, turn: int) -> set[str]:
        return {r[column][turn]["content"] for r in pq.read_table(data_dir / name).to_pylist()}

    test = questions("test.parquet", "prompt", 1)
    assert len(test) == 10
    assert not test & questions("train.parquet", "prompt", 1)
    assert not test & questions("sft_train.parquet", "messages", 1)
    assert not questions("train.parquet", "prompt", 1) & questions("sft_train.parquet", "messages", 1)


def test_sft_conversations_show_the_tool_path_or_a_wrong_direct_guess(data_dir):
    rows = pq.read_table(data_dir / "sft_train.parquet").to_pylist()
    with_tool = [r["messages"] for r in rows if len(r["messages"]) == 5]
    direct = [r["messages"] for r in rows if len(r["messages"]) == 3]
    assert len(with_tool) + len(direct) == 200
    assert 0.2 < len(with_tool) / 200 < 0.4  # tool_fraction 0.3, 200 draws
    call, result, answer = with_tool[0][2:]
    a, b = map(int, re.fullmatch(r"What is (\d+)\*(\d+)\?", with_tool[0][1]["content"]).groups())
    assert call == {"role": "assistant",
                    "content": f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a}*{b}"}}}}</tool_call>'}
    assert result == {"role": "tool", "content": str(a * b)}
    assert answer == {"role": "assistant", "content": f"#### {a * b}"}
    for messages in direct:
        a, b = map(int, re.fullmatch(r"What is (\d+)\*(\d+)\?", messages[1]["content"]).groups())
        guess = int(messages[2]["content"].removeprefix("#### "))
        assert guess != a * b and guess // 1000 == a * b // 1000  # same leading digits, other last three


def test_guess_redraws_the_last_three_digits_and_is_never_right():
    import random

    prepare_data = _load("prepare_data")
    rng = random.Random(0)
    guesses = [prepare_data.guess(287663, rng) for _ in range(200)]
    assert all(287000 <= g <= 288000 and g != 287663 for g in guesses)


# ----------------------------------------------------------------------------- reward


@pytest.mark.parametrize(
    ("response", "score", "tool_call"),
    [
        (TOOL_PATH_RESPONSE, 1.0, 1.0),
        # the exact product without the tool counts (a tiny model cannot compute it)
        ("#### 287663", 1.0, 0.0),
        ("#### 287664", 0.0, 0.0),
        ("####   287663", 1.0, 0.0),
        # a well-formed call, then a wrong answer
        (TOOL_PATH_RESPONSE.replace("#### 287663", "#### 28766"), 0.0, 1.0),
        # the answer came before a later tool call: not final
        ('#### 287663\n<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>', 0.0, 1.0),
        # the last answer counts
        ("#### 1\nassistant\n#### 287663", 1.0, 0.0),
        # malformed calls: broken JSON, another tool's name, a non-string expression, an unclosed tag
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}</tool_call>', 0.0, 0.0),
        ('<tool_call>{"name": "calc", "arguments": {"expression": "347*829"}}</tool_call>', 0.0, 0.0),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": 347}}</tool_call>', 0.0, 0.0),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}}', 0.0, 0.0),
        # Qwen's layout: newlines inside the tags
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "347*829"}}\n</tool_call>', 0.0, 1.0),
        ("", 0.0, 0.0),
    ],
)
def test_compute_score(response, score, tool_call):
    reward = _load("reward")
    result = reward.compute_score("agent_calculator", response, "287663", extra_info={"index": 0})
    assert result == {"score": score, "acc": score, "tool_call": tool_call}


# ----------------------------------------------------------------------------- tokenizer


def test_digit_tokenizer_splits_numbers_into_digits_and_keeps_the_chat_template():
    from hybridrl.models.tiny import CHAT_TEMPLATE

    build_model = _load("build_model")
    tokenizer = build_model.build_digit_tokenizer(vocab_size=384, seed=0)
    for text in ("What is 347*829?", '"expression": "347*829"', "#### 287663"):
        ids = tokenizer.encode(text, add_special_tokens=False)
        pieces = [tokenizer.decode([i]) for i in ids]
        digits = [p for p in pieces if any(c.isdigit() for c in p)]
        assert digits == [c for c in text if c.isdigit()], pieces
        assert tokenizer.decode(ids) == text
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|pad|>"
    # the tool-call markup is a handful of merged tokens, not ~60 bytes
    markup = tokenizer.encode('<tool_call>{"name": "calculator", "arguments": {"expression": "', add_special_tokens=False)
    assert len(markup) <= 20


# ----------------------------------------------------------------------------- scripts


def _main_ppo_overrides(script: Path) -> list[str]:
    """The ``key=value`` words of the script's ``main_ppo`` command, shell variables filled in."""
    text = re.sub(r"\\\n", " ", script.read_text())
    command = next(line for line in text.splitlines() if "hybridrl.trainer.main_ppo" in line)
    values = {"DATA": "/data/agent_calculator", "MODEL": "/models/Qwen2.5-0.5B-Instruct", "HERE": str(EXAMPLE)}
    command = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), "1"), command)
    words = shlex.split(command)
    return [w for w in words[words.index("hybridrl.trainer.main_ppo") + 1 :] if "=" in w]


def test_gpu_script_overrides_are_keys_of_the_config_tree():
    overrides = _main_ppo_overrides(EXAMPLE / "run_gpu.sh")
    args = dict(o.split("=", 1) for o in overrides)
    assert args["actor_rollout_ref.rollout.name"] == "vllm" and args["actor_rollout_ref.rollout.mode"] == "async"
    assert args["actor_rollout_ref.rollout.multi_turn.enable"] == "True"
    assert args["actor_rollout_ref.rollout.multi_turn.tool_config_path"] == f"{EXAMPLE}/tool_config.yaml"
    proc = subprocess.run([sys.executable, "-m", "hybridrl.trainer.main_ppo", *overrides, "--cfg", "job"],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = yaml.safe_load(proc.stdout)
    assert config["custom_reward_function"]["path"] == f"{EXAMPLE}/reward.py"
    assert config["actor_rollout_ref"]["rollout"]["n"] == 8


def test_tool_config_names_the_calculator_tool():
    tools = yaml.safe_load((EXAMPLE / "tool_config.yaml").read_text())["tools"]
    assert [t["class_name"] for t in tools] == ["hybridrl.tools.calculator_tool.CalculatorTool"]
    function = tools[0]["tool_schema"]["function"]
    assert function["name"] == "calculator" and function["parameters"]["required"] == ["expression"]
