"""The quickstart's task: "What is {a} + {b}? Answer with just the number." with a, b uniform in 10–99.

Writes ``train.parquet`` and ``test.parquet`` (128 held-out problems, never in train) in verl's schema with
``data_source = "arithmetic"``, so the built-in scorer ``hybridrl.utils.reward_score.arithmetic`` pays 1.0
when the last integer of the completion equals a + b. It reuses ``examples/data_preprocess/arithmetic.py``
(``--digits 2 --operators +``) and skips the work when the same files were already written.

Example: python examples/quickstart/make_data.py --local_dir ~/.cache/hybridrl/data/arithmetic_2digit_add
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq

PREPROCESS = Path(__file__).resolve().parents[1] / "data_preprocess" / "arithmetic.py"
MARKER = "hybridrl_data.json"


def load_arithmetic_script() -> ModuleType:
    """``examples/data_preprocess/arithmetic.py`` as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("hybridrl_examples_arithmetic", PREPROCESS)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {PREPROCESS}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_data(local_dir: str | os.PathLike, train_size: int = 4096, test_size: int = 128, seed: int = 0) -> Path:
    """Write (or reuse) the train/test parquet files; returns the folder."""
    out = Path(os.path.expanduser(str(local_dir)))
    settings = {"train_size": train_size, "test_size": test_size, "seed": seed, "digits": 2, "operators": "+"}
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()) == settings:
        print(f"[make_data] reusing {out}", flush=True)
        return out
    arithmetic = load_arithmetic_script()
    splits = arithmetic.generate(train_size, test_size, digits=2, operators="+", seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        pq.write_table(pa.Table.from_pylist(rows), out / f"{split}.parquet")
        print(f"[make_data] wrote {len(rows)} rows to {out / (split + '.parquet')}", flush=True)
    marker.write_text(json.dumps(settings))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", default="~/.cache/hybridrl/data/arithmetic_2digit_add")
    parser.add_argument("--train_size", type=int, default=4096)
    parser.add_argument("--test_size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    make_data(args.local_dir, args.train_size, args.test_size, args.seed)


if __name__ == "__main__":
    main()
