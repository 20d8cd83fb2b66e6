"""Data of the calculator-agent demo: 3-digit multiplications that need the ``calculator`` tool.

    python examples/agent_calculator/prepare_data.py --local_dir ~/data/agent_calculator [--seed 0]

Writes four parquet files into ``--local_dir``:

- ``train.parquet`` / ``test.parquet``: verl's RL schema, one row per question::

      data_source   "agent_calculator"
      agent_name    "tool_agent"                    (the agent loop that runs the row)
      prompt        [{"role": "system", ...}, {"role": "user", "content": "What is 347*829?"}]
      ability       "math"
      reward_model  {"style": "rule", "ground_truth": "287663"}
      extra_info    {"split", "index", "question", "tools_kwargs": {"calculator": {...}}}

- ``sft_train.parquet`` / ``sft_val.parquet``: ``messages`` conversations for the multi-turn SFT warm
  start (``data.multiturn.enable=True``). A ``--tool_fraction`` of them show the tool path::

      system, user "What is 347*829?",
      assistant '<tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}}</tool_call>',
      tool "287663",
      assistant "#### 287663"

  and the rest answer directly with a guess (``#### 268213``: the product with its low digits
  scrambled; a tiny model cannot multiply, so a direct answer is almost always wrong). The warm model
  then calls the tool in about ``tool_fraction`` of its samples, which leaves GRPO room to raise it.

The SFT questions and the RL questions are disjoint from the test questions (``test.parquet`` and
``sft_val.parquet`` share the held-out pairs).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "agent_calculator"
AGENT_NAME = "tool_agent"
TOOL_NAME = "calculator"
SYSTEM_PROMPT = (
    'Tool: <tool_call>{"name": "calculator", "arguments": {"expression": "..."}}</tool_call>. '
    "Answer: #### <number>."
)
# Both operands have 3 digits and their product always 6 (317 * 317 = 100489): the copy from the
# tool's result into the answer is then at a fixed offset, which a tiny model learns quickly.
OPERAND_RANGE = (317, 999)


# ----------------------------------------------------------------------------- one question


def question_text(a: int, b: int) -> str:
    """The user turn: ``What is 347*829?`` (no spaces, so the expression is a substring to copy)."""
    return f"What is {a}*{b}?"


def tool_call_text(a: int, b: int) -> str:
    """The assistant turn that calls the tool, in the ``hermes`` format (``<tool_call>{json}</tool_call>``)."""
    call = {"name": TOOL_NAME, "arguments": {"expression": f"{a}*{b}"}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def answer_text(value: int) -> str:
    """The final assistant turn: ``#### 287663``."""
    return f"#### {value}"


def guess(product: int, rng: random.Random) -> int:
    """A wrong direct answer of the right magnitude: the product with its last three digits redrawn."""
    guessed = product - product % 1000 + rng.randint(0, 999)
    return guessed if guessed != product else guessed + 1


def sample_pairs(num_pairs: int, rng: random.Random, exclude: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """``num_pairs`` distinct operand pairs not in ``exclude``."""
    pairs: list[tuple[int, int]] = []
    seen = set(exclude)
    while len(pairs) < num_pairs:
        pair = (rng.randint(*OPERAND_RANGE), rng.randint(*OPERAND_RANGE))
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    return pairs


# ----------------------------------------------------------------------------- rows


def rl_row(a: int, b: int, split: str, index: int) -> dict:
    """One row of verl's RL schema (see the module docstring)."""
    return {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question_text(a, b)},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a * b)},
        "extra_info": {
            "split": split,
            "index": index,
            "question": question_text(a, b),
            # verl passes create_kwargs to the tool's create(); the calculator needs nothing per row,
            # the ground truth is there for tools that score themselves (calc_reward)
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": str(a * b)}}},
        },
    }


def sft_conversation(a: int, b: int, use_tool: bool, rng: random.Random) -> list[dict]:
    """A demonstration: the tool path (call, result, answer) or a direct guessed answer."""
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question_text(a, b)},
    ]
    if not use_tool:
        return messages + [{"role": "assistant", "content": answer_text(guess(a * b, rng))}]
    return messages + [
        {"role": "assistant", "content": tool_call_text(a, b)},
        {"role": "tool", "content": str(a * b)},
        {"role": "assistant", "content": answer_text(a * b)},
    ]


def write_parquet(rows: list[dict], path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path)


def prepare(local_dir: str | Path, seed: int, train_size: int, test_size: int, sft_size: int,
            tool_fraction: float) -> Path:
    """Write the four parquet files (see the module docstring); returns the folder."""
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"--tool_fraction must be in [0, 1], got {tool_fraction}")
    out = Path(local_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    test_pairs = sample_pairs(test_size, rng, exclude=set())
    train_pairs = sample_pairs(train_size + sft_size, rng, exclude=set(test_pairs))
    rl_pairs, sft_pairs = train_pairs[:train_size], train_pairs[train_size:]
    write_parquet([rl_row(a, b, "train", i) for i, (a, b) in enumerate(rl_pairs)], out / "train.parquet")
    write_parquet([rl_row(a, b, "test", i) for i, (a, b) in enumerate(test_pairs)], out / "test.parquet")
    sft_rows = [{"messages": sft_conversation(a, b, rng.random() < tool_fraction, rng)} for a, b in sft_pairs]
    write_parquet(sft_rows, out / "sft_train.parquet")
    val_rows = [{"messages": sft_conversation(a, b, rng.random() < tool_fraction, rng)} for a, b in test_pairs]
    write_parquet(val_rows, out / "sft_val.parquet")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", default="~/data/agent_calculator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train_size", type=int, default=1024, help="RL training questions")
    parser.add_argument("--test_size", type=int, default=128, help="held-out questions (RL validation, SFT val)")
    parser.add_argument("--sft_size", type=int, default=4096, help="SFT demonstrations (questions disjoint from RL)")
    parser.add_argument("--tool_fraction", type=float, default=0.4, help="share of SFT demonstrations that use the tool")
    args = parser.parse_args(argv)
    out = prepare(args.local_dir, args.seed, args.train_size, args.test_size, args.sft_size, args.tool_fraction)
    print(f"wrote train/test (RL) and sft_train/sft_val (SFT) parquet to {out}")


if __name__ == "__main__":
    main()
