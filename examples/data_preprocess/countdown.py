"""Generate the Countdown task (``data_source = "countdown"``, as TinyZero) as train/test parquet.

Each problem gives ``--num_numbers`` numbers in ``[1, --max_number]`` and a target that is reachable
by combining all of them once with ``+ - * /`` (built from a random expression over the numbers, so
every problem is solvable). ``reward_model.ground_truth = {"target": int, "numbers": [int, ...]}``;
scored by ``hybridrl.utils.reward_score.countdown``. Deterministic for a given ``--seed``.

Example: python examples/data_preprocess/countdown.py --local_dir ~/data/countdown --num_numbers 3
"""

from __future__ import annotations

import argparse
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "countdown"
PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. "
    "And return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
)


def reachable_target(rng: random.Random, numbers: list[int], max_target: int) -> int | None:
    """Fold the shuffled numbers with random ops (exact division only); a positive result ≤ max_target or None."""
    order = numbers[:]
    rng.shuffle(order)
    value = order[0]
    for n in order[1:]:
        ops = ["+", "-", "*"] + (["/"] if n != 0 and value % n == 0 else [])
        op = rng.choice(ops)
        value = {"+": value + n, "-": value - n, "*": value * n, "/": value // n if op == "/" else 0}[op]
    return value if 0 < value <= max_target else None


def make_row(numbers: list[int], target: int, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": PROMPT.format(numbers=numbers, target=target)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": {"target": target, "numbers": numbers}},
        "extra_info": {"split": split, "index": index},
    }


def generate(train_size: int, test_size: int, num_numbers: int, max_number: int, max_target: int, seed: int):
    """``{"train": rows, "test": rows}``; every row's target is reachable with its numbers."""
    rng, rows = random.Random(seed), []
    while len(rows) < train_size + test_size:
        numbers = [rng.randint(1, max_number) for _ in range(num_numbers)]
        target = reachable_target(rng, numbers, max_target)
        if target is not None:
            rows.append((numbers, target))
    splits = {"train": rows[:train_size], "test": rows[train_size:]}
    return {s: [make_row(n, t, s, i) for i, (n, t) in enumerate(rs)] for s, rs in splits.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", "--local_save_dir", dest="local_dir", default="~/data/countdown")
    parser.add_argument("--train_size", type=int, default=2000)
    parser.add_argument("--test_size", type=int, default=200)
    parser.add_argument("--num_numbers", type=int, default=3)
    parser.add_argument("--max_number", type=int, default=99)
    parser.add_argument("--max_target", type=int, default=999)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    out_dir = os.path.expanduser(args.local_dir)
    os.makedirs(out_dir, exist_ok=True)
    splits = generate(args.train_size, args.test_size, args.num_numbers, args.max_number, args.max_target, args.seed)
    for split, rows in splits.items():
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(out_dir, f"{split}.parquet"))
        print(f"wrote {len(rows)} rows to {os.path.join(out_dir, split + '.parquet')}")


if __name__ == "__main__":
    main()
