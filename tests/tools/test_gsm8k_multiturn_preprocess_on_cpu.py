"""examples/data_preprocess/gsm8k_multiturn_w_tool.py: verl's multi-turn GSM8K rows from a local copy."""

import asyncio
import importlib.util
import json
import os

import pyarrow.parquet as pq

from hybridrl.interactions.utils.interaction_registry import initialize_interactions_from_config
from hybridrl.tools.executor import ToolExecutor
from hybridrl.tools.tool_registry import initialize_tools_from_config

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(REPO, "examples", "data_preprocess", "gsm8k_multiturn_w_tool.py")
CONFIG = os.path.join(REPO, "examples", "sglang_multiturn", "config")

RAW = {
    "train": [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "A car costs $1,200 and a bike $300. Total?", "answer": "1200+300=1500\n#### 1,500"},
    ],
    "test": [{"question": "It is 5 degrees, it drops 8. Now?", "answer": "5-8=-3\n#### -3"}],
}


def load_script():
    spec = importlib.util.spec_from_file_location("preprocess_gsm8k_multiturn_w_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_follow_verl(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, rows in RAW.items():
        (raw / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    script = load_script()
    script.main(["--input", str(raw), "--local_dir", str(tmp_path / "out")])
    train = pq.read_table(str(tmp_path / "out" / "train.parquet")).to_pylist()
    test = pq.read_table(str(tmp_path / "out" / "test.parquet")).to_pylist()
    assert (len(train), len(test)) == (2, 1)
    row = train[1]
    question = RAW["train"][1]["question"] + " Let's think step by step and output the final answer after `####`."
    assert row["data_source"] == "openai/gsm8k" and row["agent_name"] == "tool_agent" and row["ability"] == "math"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["prompt"][1]["content"] == question
    assert "`calc_gsm8k_reward` tool" in row["prompt"][0]["content"]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "1500"}  # commas removed
    extra = row["extra_info"]
    assert (extra["split"], extra["index"], extra["need_tools_kwargs"]) == ("train", 1, True)
    assert extra["tools_kwargs"] == {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "1500"}}}
    assert extra["interaction_kwargs"] == {"name": "gsm8k", "query": question, "ground_truth": "1500"}
    assert test[0]["reward_model"]["ground_truth"] == "-3"


def test_row_kwargs_drive_the_shipped_tool_and_interaction():
    """The tools_kwargs / interaction_kwargs of a row are exactly what the shipped configs' classes take."""
    script = load_script()
    row = script.make_row(RAW["test"][0], "test", 0, script.load_gsm8k_helpers())
    [tool] = initialize_tools_from_config(os.path.join(CONFIG, "tool_config", "gsm8k_tool_config.yaml"))
    tool_kwargs = row["extra_info"]["tools_kwargs"][tool.name]
    result = asyncio.run(ToolExecutor().call_once(tool, {"answer": "-3"}, tool_kwargs))
    assert (result.text, result.reward, result.error) == ("Current parsed answer='-3' reward=1.0", 0.0, None)
    interaction_kwargs = dict(row["extra_info"]["interaction_kwargs"])
    interaction = initialize_interactions_from_config(
        os.path.join(CONFIG, "interaction_config", "gsm8k_interaction_config.yaml")
    )[interaction_kwargs.pop("name")]
    instance_id = asyncio.run(interaction.start_interaction("c", **interaction_kwargs))
    messages = [{"role": "assistant", "content": "5 - 8 = -3 #### -3"}]
    assert asyncio.run(interaction.generate_response(instance_id, messages))[:3] == (
        True,
        "Your response is correct!",
        1.0,
    )


def test_rl_dataset_reads_the_rows(tmp_path):
    from hybridrl.models.tiny import build_tokenizer
    from hybridrl.utils.dataset.rl_dataset import RLHFDataset

    raw = tmp_path / "raw"
    raw.mkdir()
    for split, rows in RAW.items():
        (raw / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    load_script().main(["--input", str(raw), "--local_dir", str(tmp_path / "out")])
    tokenizer = build_tokenizer()  # a real tokenizer with a ChatML template (system turns included)
    dataset = RLHFDataset(
        str(tmp_path / "out" / "train.parquet"), tokenizer, {"max_prompt_length": 256, "truncation": "left"}
    )
    item = dataset[0]
    assert item["data_source"] == "openai/gsm8k" and item["reward_model"]["ground_truth"] == "7"
    assert item["extra_info"]["tools_kwargs"] == {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}
