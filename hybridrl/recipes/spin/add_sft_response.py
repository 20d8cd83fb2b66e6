"""Add SPIN's SFT target to a verl-schema parquet: ``extra_info.response`` copied from another field.

SPIN pairs each prompt's SFT response (chosen) with the model's own generation (rejected); the recipe reads it
from ``extra_info[data.response_key]`` (default ``response``). This fills it from a dotted field of the row,
e.g. ``reward_model.ground_truth`` for the synthetic arithmetic task (the answer *is* the target), or
``extra_info.answer`` for GSM8K (the worked solution).

Example: python hybridrl/recipes/spin/add_sft_response.py --input ~/data/arithmetic --output ~/data/arithmetic_spin \
             --source reward_model.ground_truth
"""

from __future__ import annotations

import argparse
import os

import pyarrow as pa
import pyarrow.parquet as pq


def lookup(row: dict, dotted: str) -> object:
    value: object = row
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"field {dotted!r} not found in a row (keys: {sorted(row)})")
        value = value[part]
    return value


def add_response(rows: list[dict], source: str, key: str = "response") -> list[dict]:
    """Each row with ``extra_info[key] = str(row[source])``."""
    return [{**row, "extra_info": {**(row.get("extra_info") or {}), key: str(lookup(row, source))}} for row in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="folder with train.parquet / test.parquet")
    parser.add_argument("--output", required=True)
    parser.add_argument("--source", default="reward_model.ground_truth", help="dotted field holding the target")
    parser.add_argument("--key", default="response", help="the extra_info key to write (data.response_key)")
    args = parser.parse_args(argv)
    in_dir, out_dir = os.path.expanduser(args.input), os.path.expanduser(args.output)
    os.makedirs(out_dir, exist_ok=True)
    for name in sorted(os.listdir(in_dir)):
        if name.endswith(".parquet"):
            rows = add_response(pq.read_table(os.path.join(in_dir, name)).to_pylist(), args.source, args.key)
            pq.write_table(pa.Table.from_pylist(rows), os.path.join(out_dir, name))
            print(f"wrote {len(rows)} rows to {os.path.join(out_dir, name)}")


if __name__ == "__main__":
    main()
