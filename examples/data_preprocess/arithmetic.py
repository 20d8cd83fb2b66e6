"""Generate the synthetic arithmetic task (``data_source = "arithmetic"``) as train/test parquet.

Each prompt asks for the value of ``a <op> b`` with ``--digits``-digit operands and an operator from
``--operators``; ``reward_model.ground_truth`` is the integer result as a string. Scored by
``hybridrl.utils.reward_score.arithmetic`` (the last integer of the completion must equal it).
Deterministic for a given ``--seed``; test questions never repeat train questions.

Example: python examples/data_preprocess/arithmetic.py --local_dir ~/data/arithmetic --digits 2 --operators +-
"""

from __future__ import annotations

import argparse
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "arithmetic"
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_problem(rng: random.Random, digits: int, operators: str) -> tuple[str, int]:
    low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    a, b, op = rng.randint(low, high), rng.randint(low, high), rng.choice(operators)
    return f"{a} {op} {b}", _OPS[op](a, b)


def make_row(expression: str, value: int, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"What is {expression}? Answer with just the number."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(value)},
        "extra_info": {"split": split, "index": index, "expression": expression},
    }


def generate(train_size: int, test_size: int, digits: int, operators: str, seed: int) -> dict[str, list[dict]]:
    """``{"train": rows, "test": rows}`` with distinct expressions across both splits."""
    bad = set(operators) - set(_OPS)
    if bad or not operators:
        raise ValueError(f"--operators may only contain {''.join(_OPS)}, got {operators!r}")
    capacity = (10**digits - (0 if digits == 1 else 10 ** (digits - 1))) ** 2 * len(set(operators))
    if train_size + test_size > capacity:
        raise ValueError(f"only {capacity} distinct problems exist for {digits=} {operators=}")
    rng, seen, problems = random.Random(seed), set(), []
    while len(problems) < train_size + test_size:
        expression, value = make_problem(rng, digits, operators)
        if expression not in seen:
            seen.add(expression)
            problems.append((expression, value))
    splits = {"train": problems[:train_size], "test": problems[train_size:]}
    return {s: [make_row(e, v, s, i) for i, (e, v) in enumerate(ps)] for s, ps in splits.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", "--local_save_dir", dest="local_dir", default="~/data/arithmetic")
    parser.add_argument("--train_size", type=int, default=2000)
    parser.add_argument("--test_size", type=int, default=200)
    parser.add_argument("--digits", type=int, default=2)
    parser.add_argument("--operators", default="+-*")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    out_dir = os.path.expanduser(args.local_dir)
    os.makedirs(out_dir, exist_ok=True)
    for split, rows in generate(args.train_size, args.test_size, args.digits, args.operators, args.seed).items():
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(out_dir, f"{split}.parquet"))
        print(f"wrote {len(rows)} rows to {os.path.join(out_dir, split + '.parquet')}")


if __name__ == "__main__":
    main()
