"""Score a trained quickstart model on addition problems it was neither trained nor validated on.

The quickstart validates on 128 held-out problems; 128 is few (a 95% interval ~±7 points wide), and they are one
draw of the task. This script scores a model on a larger, independent set, greedily, with the trainer's rule (the
last integer of the completion must equal the sum):

- default: every 2-digit addition "a + b" (a, b in 10–99, 8,100 in all) that is in neither make_data.py's training
  split nor its 128 validation problems (same sizes and seed as the quickstart: 3,876 problems), or a random
  ``--num`` of them (``--sample_seed``); the 128 validation problems are scored too, for comparison;
- ``--file``: your own problems instead, a verl-schema parquet or JSONL (``prompt`` as chat messages,
  ``reward_model.ground_truth``, ``data_source``), scored by the data source's built-in scorer.

It prints the accuracy with its 95% Wilson interval, by set and (for "a + b" problems) with and without a carry
from the units digit, and optionally writes them, with the wrong answers, as JSON.

Example (after the quickstart; its last line names the model folder):
    python examples/quickstart/evaluate.py --model outputs/quickstart/models/smollm2_grpo_seed1 --num 1000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ADDITION = re.compile(r"^\s*(\d+)\s*\+\s*(\d+)\s*$")


def _load_script(name: str) -> ModuleType:
    """A sibling script (``make_data.py``, ``summarize.py``) as a module: the examples are not a package."""
    spec = importlib.util.spec_from_file_location(f"hybridrl_quickstart_{name}", HERE / f"{name}.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {HERE / name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# ---- the problem sets -------------------------------------------------------------------------
def quickstart_splits(train_size: int = 4096, test_size: int = 128, seed: int = 0) -> dict[str, list[dict]]:
    """make_data.py's rows (the same generator, sizes and seed as the quickstart), without writing files."""
    arithmetic = _load_script("make_data").load_arithmetic_script()
    return arithmetic.generate(train_size, test_size, digits=2, operators="+", seed=seed)


def unseen_additions(splits: dict[str, list[dict]]) -> list[dict]:
    """Every 2-digit addition whose expression is in no split, as verl-schema rows (``split="independent"``)."""
    arithmetic = _load_script("make_data").load_arithmetic_script()
    seen = {row["extra_info"]["expression"] for rows in splits.values() for row in rows}
    expressions = (f"{a} + {b}" for a in range(10, 100) for b in range(10, 100))
    fresh = [e for e in expressions if e not in seen]
    return [arithmetic.make_row(e, sum(map(int, e.split(" + "))), "independent", i) for i, e in enumerate(fresh)]


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Rows of a verl-schema parquet or JSONL file; a ValueError naming the file and the missing key."""
    path = Path(os.path.expanduser(str(path)))
    if not path.is_file():
        raise FileNotFoundError(f"--file {path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        with path.open() as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
    for index, row in enumerate(rows):
        problem = _row_problem(row)
        if problem:
            raise ValueError(f"--file {path}, row {index}: {problem} (expected verl's schema: 'prompt' as a list of "
                             "chat messages, 'reward_model': {'ground_truth': ...}, 'data_source')")
    if not rows:
        raise ValueError(f"--file {path} holds no rows")
    return rows


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "not a record"
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and "content" in m for m in prompt):
        return "'prompt' is not a list of {'role', 'content'} messages"
    if not isinstance(row.get("reward_model"), dict) or "ground_truth" not in row["reward_model"]:
        return "no 'reward_model.ground_truth'"
    if "data_source" not in row:
        return "no 'data_source'"
    return None


def sample_rows(rows: list[dict], num: int | None, seed: int) -> list[dict]:
    """``num`` rows drawn without replacement (all rows, in order, when ``num`` is None or ≥ their count)."""
    if num is None or num >= len(rows):
        return list(rows)
    if num <= 0:
        raise ValueError(f"--num must be positive, got {num}")
    return random.Random(seed).sample(rows, num)


def has_carry(row: dict) -> bool | None:
    """Whether an "a + b" problem carries from the units digit (None for other problems)."""
    match = ADDITION.match(str((row.get("extra_info") or {}).get("expression", "")))
    if match is None:
        return None
    a, b = (int(g) for g in match.groups())
    return a % 10 + b % 10 >= 10


# ---- generation and scoring -------------------------------------------------------------------
def encode_prompts(tokenizer: Any, rows: list[dict], max_prompt_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``input_ids`` and ``attention_mask`` ``[B, P]``, tokenized as the trainer's dataset does
    (chat template with the generation prompt, no added special tokens); longer prompts are an error."""
    encoded = []
    for row in rows:
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) > max_prompt_length:
            raise ValueError(f"a prompt has {len(ids)} tokens > --max_prompt_length={max_prompt_length}: raise it")
        encoded.append(ids)
    width = max(len(ids) for ids in encoded)
    input_ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for i, ids in enumerate(encoded):
        input_ids[i, width - len(ids):] = torch.tensor(ids)
        attention_mask[i, width - len(ids):] = 1
    return input_ids, attention_mask


def greedy_completions(model: Any, tokenizer: Any, rows: list[dict], max_new_tokens: int,
                       max_prompt_length: int) -> list[str]:
    """The greedy completion of each row's prompt (hybridrl's decode loop, stopping at the model's EOS ids)."""
    from hybridrl.generation import SamplingParams, collect_eos_token_ids
    from hybridrl.workers.rollout.decoding import decode_batch

    input_ids, attention_mask = encode_prompts(tokenizer, rows, max_prompt_length)
    params = SamplingParams(
        temperature=0.0, top_k=-1, top_p=1.0, do_sample=False, max_new_tokens=max_new_tokens, n=1,
        ignore_eos=False, eos_token_ids=collect_eos_token_ids(tokenizer, getattr(model, "generation_config", None)),
        pad_token_id=tokenizer.pad_token_id, calculate_log_probs=False,
    )
    result = decode_batch(model, input_ids, attention_mask, params)
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in result.token_ids]


def score(row: dict, completion: str) -> float:
    """The trainer's reward for ``completion`` (the row's data source's built-in scorer), as 0/1."""
    from hybridrl.utils.reward_score import default_compute_score

    result = default_compute_score(row["data_source"], completion, row["reward_model"]["ground_truth"],
                                   row.get("extra_info"))
    value = result["score"] if isinstance(result, dict) else result
    return float(value)


@dataclass
class Tally:
    """Correct answers of one set, overall and by carry (``None``: not an "a + b" problem)."""

    correct: int = 0
    total: int = 0
    by_carry: dict[str, list[int]] = field(default_factory=dict)  # "carry"/"no carry" -> [correct, total]
    mistakes: list[dict] = field(default_factory=list)

    def add(self, row: dict, completion: str, reward: float) -> None:
        right = reward >= 1.0
        self.correct, self.total = self.correct + right, self.total + 1
        carry = has_carry(row)
        if carry is not None:
            bucket = self.by_carry.setdefault("carry" if carry else "no carry", [0, 0])
            bucket[0], bucket[1] = bucket[0] + right, bucket[1] + 1
        if not right:
            expression = (row.get("extra_info") or {}).get("expression")
            self.mistakes.append({"expression": expression, "ground_truth": row["reward_model"]["ground_truth"],
                                  "completion": completion})

    def summary(self, wilson: Any) -> dict[str, Any]:
        low, high = wilson(self.correct, self.total)
        out: dict[str, Any] = {"correct": self.correct, "total": self.total, "accuracy": self.correct / self.total,
                               "ci95_low": low, "ci95_high": high}
        for name, (correct, total) in sorted(self.by_carry.items()):
            out[name] = {"correct": correct, "total": total, "accuracy": correct / total}
        return out


def evaluate_sets(model: Any, tokenizer: Any, sets: dict[str, list[dict]], batch_size: int, max_new_tokens: int,
                  max_prompt_length: int, log: Any = print) -> dict[str, Tally]:
    """Greedy-score every set in batches of ``batch_size`` rows, printing progress with an ETA."""
    tallies = {name: Tally() for name in sets}
    jobs = [(name, rows[i:i + batch_size]) for name, rows in sets.items() for i in range(0, len(rows), batch_size)]
    total, done, start = sum(len(rows) for rows in sets.values()), 0, time.perf_counter()
    for name, batch in jobs:
        for row, completion in zip(batch, greedy_completions(model, tokenizer, batch, max_new_tokens,
                                                             max_prompt_length)):
            tallies[name].add(row, completion, score(row, completion))
        done += len(batch)
        elapsed = time.perf_counter() - start
        log(f"[evaluate] {done}/{total} problems, {elapsed:.0f} s, ETA {elapsed / done * (total - done):.0f} s")
    return tallies


def load_model(model_dir: str, dtype: str, decode_rows: int = 64) -> tuple[Any, Any, str]:
    """The Hugging Face model (eval mode, CPU) and tokenizer; ``auto`` dtype is bf16 only where it measures faster
    at the model's decode shapes (:mod:`hybridrl.utils.cpu_precision`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hybridrl.utils.cpu_precision import choose_precision, measure_precision, model_matmul_shapes

    if not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"--model {model_dir}: not a Hugging Face model folder (no config.json); the "
                                "quickstart links its trained model as outputs/quickstart/models/<experiment>")
    if dtype == "auto":
        shapes = model_matmul_shapes(json.loads((Path(model_dir) / "config.json").read_text()), decode_rows)
        dtype = {"bf16": "bfloat16", "fp32": "float32"}[choose_precision("auto", measure_precision(shapes))]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    return model, tokenizer, dtype


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Hugging Face model folder (the quickstart's trained model)")
    parser.add_argument("--file", default=None, help="score these verl-schema rows (parquet/JSONL) instead")
    parser.add_argument("--num", type=int, default=None, help="a random subset of this many problems (default: all)")
    parser.add_argument("--sample_seed", type=int, default=1234)
    parser.add_argument("--no_validation", action="store_true", help="skip the 128 validation problems")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_new_tokens", type=int, default=16, help="the quickstart's RESPONSE_LENGTH")
    parser.add_argument("--max_prompt_length", type=int, default=64)
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="also write the figures and the wrong answers here")
    args = parser.parse_args(argv)
    if args.batch_size <= 0:
        parser.error(f"--batch_size must be positive, got {args.batch_size}")

    torch.set_num_threads(args.threads)
    if args.file:
        sets = {"file": sample_rows(read_rows(args.file), args.num, args.sample_seed)}
    else:
        splits = quickstart_splits()
        sets = {"independent": sample_rows(unseen_additions(splits), args.num, args.sample_seed)}
        if not args.no_validation:
            sets["validation"] = splits["test"]
    model, tokenizer, dtype = load_model(args.model, args.dtype, args.batch_size)
    print(f"[evaluate] {args.model} ({dtype}): " + ", ".join(f"{k} {len(v)} problems" for k, v in sets.items()),
          flush=True)
    tallies = evaluate_sets(model, tokenizer, sets, args.batch_size, args.max_new_tokens, args.max_prompt_length,
                            log=lambda line: print(line, flush=True))
    wilson = _load_script("summarize").wilson_interval
    figures = {name: tally.summary(wilson) for name, tally in tallies.items()}
    for name, fig in figures.items():
        carries = "; ".join(f"{k} {fig[k]['accuracy']:.1%} of {fig[k]['total']}"
                            for k in ("no carry", "carry") if k in fig)
        print(f"[evaluate] {name}: {fig['correct']}/{fig['total']} = {fig['accuracy']:.1%} "
              f"(95% interval {fig['ci95_low']:.1%}–{fig['ci95_high']:.1%})" + (f"; {carries}" if carries else ""))
    if args.json:
        report = {"model": args.model, "dtype": dtype, "sets": figures,
                  "mistakes": {name: tally.mistakes for name, tally in tallies.items()}}
        Path(args.json).write_text(json.dumps(report, indent=1))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
