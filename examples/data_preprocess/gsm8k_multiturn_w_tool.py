"""GSM8K for multi-turn tool use (verl's ``gsm8k_multiturn_w_tool.py`` / ``gsm8k_tool_agent_loop.py`` rows).

Input (``--local_dataset_path``, alias ``--input``): a local GSM8K copy in any layout ``gsm8k.py`` accepts
(``{split}.jsonl``, ``{split}.parquet``, ``main/{split}-*.parquet``) with ``question`` / ``answer``.

Output (``--local_save_dir``, alias ``--local_dir``): ``train.parquet`` and ``test.parquet`` with rows::

    data_source  "openai/gsm8k"
    agent_name   "tool_agent"
    prompt       [{"role": "system", "content": SYSTEM_PROMPT},       # use calc_gsm8k_reward, answer "#### n"
                  {"role": "user", "content": question + " " + INSTRUCTION}]
    ability      "math"
    reward_model {"style": "rule", "ground_truth": "<number>"}
    extra_info   {"split", "index", "answer", "question", "need_tools_kwargs": True,
                  "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "<number>"}}},
                  "interaction_kwargs": {"name": "gsm8k", "query": <user content>, "ground_truth": "<number>"}}

Train with ``actor_rollout_ref.rollout.multi_turn.tool_config_path=
examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml`` (and, for the simulated user,
``interaction_config_path=examples/sglang_multiturn/config/interaction_config/gsm8k_interaction_config.yaml``).

Example: python examples/data_preprocess/gsm8k_multiturn_w_tool.py --input ~/gsm8k --local_dir ~/data/gsm8k_tool
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq

TOOL_NAME = "calc_gsm8k_reward"
AGENT_NAME = "tool_agent"
INTERACTION_NAME = "gsm8k"
INSTRUCTION = "Let's think step by step and output the final answer after `####`."
SYSTEM_PROMPT = (
    "You are a math expert. You are given a question and you need to solve it step by step. "
    "Reasoning step by step before any tool call. "
    f"You should use the `{TOOL_NAME}` tool after step by step solving the question, "
    "before generate final answer at least once and refine your answer if necessary. "
    "Put your final answer in the format of `#### <answer>`."
)


def load_gsm8k_helpers() -> ModuleType:
    """The sibling ``gsm8k.py`` (its file finding, reading and answer extraction are reused)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gsm8k.py")
    spec = importlib.util.spec_from_file_location("_gsm8k_preprocess_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_row(record: dict, split: str, index: int, helpers: ModuleType) -> dict:
    """One parquet row of a ``{"question", "answer"}`` record (see the module docstring)."""
    question_raw, answer_raw = record["question"], record["answer"]
    question = question_raw + " " + INSTRUCTION
    solution = helpers.extract_solution(answer_raw)
    return {
        "data_source": helpers.DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": answer_raw,
            "question": question_raw,
            "need_tools_kwargs": True,
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": solution}}},
            "interaction_kwargs": {"name": INTERACTION_NAME, "query": question, "ground_truth": solution},
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", "--input", dest="local_dataset_path", required=True,
                        help="folder with the GSM8K train/test files")  # fmt: skip
    parser.add_argument("--local_save_dir", "--local_dir", dest="local_save_dir", default="~/data/gsm8k_tool")
    parser.add_argument("--hdfs_dir", default=None, help="not supported (no HDFS here); must stay unset")
    args = parser.parse_args(argv)
    if args.hdfs_dir:
        parser.error("--hdfs_dir is not supported; copy the output folder yourself")
    helpers = load_gsm8k_helpers()
    root = os.path.expanduser(args.local_dataset_path)
    out_dir = os.path.expanduser(args.local_save_dir)
    os.makedirs(out_dir, exist_ok=True)
    for split in ("train", "test"):
        records = helpers.read_records(helpers.find_split_files(root, split))
        rows = [make_row(record, split, index, helpers) for index, record in enumerate(records)]
        path = os.path.join(out_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
