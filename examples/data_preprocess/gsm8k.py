"""Convert GSM8K from a local copy (Hugging Face layout) into verl's RL parquet schema.

Input (``--local_dataset_path``): a folder holding ``train``/``test`` splits as ``{split}.jsonl``,
``{split}.parquet``, ``{split}-*.parquet`` or ``main/{split}-*.parquet`` (the ``openai/gsm8k`` repo
layout), with columns ``question`` and ``answer`` (ending in ``#### <number>``).

Output (``--local_save_dir``, alias ``--local_dir``): ``train.parquet`` and ``test.parquet`` with rows::

    data_source  "openai/gsm8k"
    prompt       [{"role": "user", "content": question + " " + INSTRUCTION}]
    ability      "math"
    reward_model {"style": "rule", "ground_truth": "<number without commas>"}
    extra_info   {"split", "index", "answer", "question"}

Example: python examples/data_preprocess/gsm8k.py --local_dataset_path ~/gsm8k --local_save_dir ~/data/gsm8k
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def extract_solution(answer: str) -> str:
    """The number after ``#### `` with commas removed; raises ValueError when absent."""
    match = re.search(r"#### (\-?[0-9\.\,]+)", answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>': {answer[-80:]!r}")
    return match.group(0).split("#### ")[1].replace(",", "")


def find_split_files(root: str, split: str) -> list[str]:
    """Files of ``split`` under ``root`` (see the module docstring for the accepted layouts)."""
    patterns = [
        f"{split}.jsonl",
        f"{split}.parquet",
        f"{split}-*.parquet",
        f"main/{split}-*.parquet",
        f"main/{split}.jsonl",
    ]
    for pattern in patterns:
        files = sorted(glob.glob(os.path.join(root, pattern)))
        if files:
            return files
    raise FileNotFoundError(f"no {split} split under {root} (looked for {patterns})")


def read_records(files: list[str]) -> list[dict]:
    records: list[dict] = []
    for path in files:
        if path.endswith(".jsonl"):
            with open(path) as f:
                records.extend(json.loads(line) for line in f if line.strip())
        else:
            records.extend(pq.read_table(path).to_pylist())
    for i, record in enumerate(records):
        if "question" not in record or "answer" not in record:
            raise ValueError(f"{files}: record {i} lacks 'question'/'answer' (has {sorted(record)})")
    return records


def make_row(record: dict, split: str, index: int) -> dict:
    question_raw, answer_raw = record["question"], record["answer"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question_raw + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(answer_raw)},
        "extra_info": {"split": split, "index": index, "answer": answer_raw, "question": question_raw},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", required=True, help="folder with the GSM8K train/test files")
    parser.add_argument("--local_save_dir", "--local_dir", dest="local_save_dir", default="~/data/gsm8k")
    parser.add_argument("--hdfs_dir", default=None, help="not supported (no HDFS here); must stay unset")
    args = parser.parse_args(argv)
    if args.hdfs_dir:
        parser.error("--hdfs_dir is not supported; copy the output folder yourself")
    root = os.path.expanduser(args.local_dataset_path)
    out_dir = os.path.expanduser(args.local_save_dir)
    os.makedirs(out_dir, exist_ok=True)
    for split in ("train", "test"):
        rows = [make_row(r, split, i) for i, r in enumerate(read_records(find_split_files(root, split)))]
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(out_dir, f"{split}.parquet"))
        print(f"wrote {len(rows)} rows to {os.path.join(out_dir, split + '.parquet')}")


if __name__ == "__main__":
    main()
