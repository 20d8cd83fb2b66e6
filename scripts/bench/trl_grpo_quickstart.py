"""The peer of the quickstart: TRL's GRPOTrainer on the same model, task and held-out set, for comparison.

Same task as ``examples/quickstart``: "What is {a} + {b}? Answer with just the number.", a, b uniform in
10–99, reward 1.0 when the last integer of the completion equals a + b (hybridrl's ``arithmetic`` scorer),
the same parquet files (``make_data.py``) and the same prepared SmolLM2 folder (``prepare_model.py``).
The TRL configuration is the one the issue measured: ``per_device_train_batch_size=32, num_generations=8,
max_completion_length=16, learning_rate=5e-6, beta=0.0, temperature=1.0``, fp32 on CPU (``--bf16``: TRL's
``bf16=True`` — bf16 autocast over fp32 master weights, as hybridrl's FSDP mixed precision).

Greedy validation accuracy (16 new tokens, last-integer match) on the held-out prompts is measured before
training and every ``--eval_every`` steps; the output is one JSON line per evaluation plus a summary with
the training minutes (evaluation excluded) to reach ``--target``.

TRL is a dev/benchmark dependency only: ``pip install trl datasets torch==2.13.0`` (the pin keeps the CPU torch).

``bench_grpo_vs_trl.py`` drives it with hybridrl's settings: ``--model_dir`` (any local causal LM, e.g. the tiny
model), ``--prompts/--n/--response_length`` (one step = prompts × n completions), ``--weight_decay``,
``--lr_scheduler_type constant``, ``--gradient_checkpointing false`` and ``--eval_every 0`` (no evaluation);
with ``--step_times`` every step also prints ``{"step", "step_s", "gen_s", "gen_score_s", "update_s"}``: wall time of
the step (generation, reward, loss, backward, optimizer; evaluation excluded), of its ``generate`` calls, of
``_generate_and_score_completions`` (generation, decoding, reward, advantages) and the rest (forward, backward,
optimizer). ``--ignore_eos`` makes every completion ``--response_length`` tokens long (``min_new_tokens``), as
hybridrl's ``rollout.min_tokens``. The summary line carries the process's peak RSS (``peak_rss_gb``).

Example: python scripts/bench/trl_grpo_quickstart.py --max_steps 61 --eval_every 10 --out trl.jsonl
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def greedy_accuracy(model, tokenizer, rows: list[dict], max_new_tokens: int = 16, batch_size: int = 64) -> float:
    """Fraction of ``rows`` whose greedy completion's last integer equals the ground truth."""
    import torch

    from hybridrl.utils.reward_score.arithmetic import compute_score

    tokenizer.padding_side = "left"
    correct = 0.0
    model.eval()
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        texts = [tokenizer.apply_chat_template(list(r["prompt"]), tokenize=False, add_generation_prompt=True)
                 for r in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        completions = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(compute_score(c, r["reward_model"]["ground_truth"]) for c, r in zip(completions, chunk))
    model.train()
    return correct / len(rows)


def arithmetic_reward(completions, ground_truth, **kwargs) -> list[float]:
    """TRL reward function: conversational completions → 1.0/0.0 per completion."""
    from hybridrl.utils.reward_score.arithmetic import compute_score

    return [compute_score(c[0]["content"], gt) for c, gt in zip(completions, ground_truth)]


def timed_method(obj, name: str, totals: dict[str, float], key: str) -> None:
    """Wrap ``obj.name`` so each call adds its wall seconds to ``totals[key]`` (the trainer's stage times).
    A method this TRL version lacks is left alone (its stage then reads 0)."""
    method = getattr(obj, name, None)
    if method is None:
        print(f"[trl_grpo_quickstart] {type(obj).__name__}.{name} not found: its stage time reads 0", file=sys.stderr)
        return

    def wrapper(*a, **kw):
        start = time.perf_counter()
        try:
            return method(*a, **kw)
        finally:
            totals[key] += time.perf_counter() - start

    setattr(obj, name, wrapper)


def peak_rss_gb() -> float:
    """This process's peak resident set (``ru_maxrss``, KiB on Linux) in GiB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache_dir", default=os.path.expanduser("~/.cache/hybridrl"))
    parser.add_argument("--max_steps", type=int, default=61)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--learning_rate", type=float, default=5e-6)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--target", type=float, default=0.727)
    parser.add_argument("--out", default=None, help="append JSON lines here as well as to stdout")
    parser.add_argument("--model_dir", default=None, help="a local causal LM instead of the prepared SmolLM2")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="completions per prompt (num_generations)")
    parser.add_argument("--response_length", type=int, default=16, help="max_completion_length")
    parser.add_argument("--weight_decay", type=float, default=None, help="AdamW weight decay (TRL default 0)")
    parser.add_argument("--lr_scheduler_type", default=None, help="e.g. constant (TRL default: linear)")
    parser.add_argument("--gradient_checkpointing", choices=("true", "false"), default=None,
                        help="TRL's GRPOConfig default is true")
    parser.add_argument("--bf16", action="store_true", help="GRPOConfig(bf16=True): bf16 autocast, fp32 weights")
    parser.add_argument("--step_times", action="store_true", help="print each step's wall time and stage times")
    parser.add_argument("--ignore_eos", action="store_true", help="every completion --response_length tokens long")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import pandas as pd
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    quickstart = ROOT / "examples" / "quickstart"
    model_dir = args.model_dir or _load("qs_prepare_model", quickstart / "prepare_model.py").prepare(args.cache_dir)
    data_dir = _load("qs_make_data", quickstart / "make_data.py").make_data(
        Path(args.cache_dir) / "data" / "arithmetic_2digit_add")
    train = pd.read_parquet(data_dir / "train.parquet")
    val_rows = pd.read_parquet(data_dir / "test.parquet").to_dict("records")
    dataset = Dataset.from_dict({
        "prompt": [[dict(m) for m in p] for p in train["prompt"]],
        "ground_truth": [rm["ground_truth"] for rm in train["reward_model"]],
    })
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    def emit(row: dict) -> None:
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as fp:
                fp.write(json.dumps(row) + "\n")

    clock = {"train_s": 0.0, "since": time.time(), "hit": None, "step_start": time.perf_counter()}
    stage_s = {"gen": 0.0, "gen_score": 0.0}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, _args, state, control, **kwargs):
            clock["step_start"] = time.perf_counter()
            stage_s.update(gen=0.0, gen_score=0.0)

        def on_step_end(self, _args, state, control, **kwargs):
            if args.step_times:
                step_s = time.perf_counter() - clock["step_start"]
                emit({"step": state.global_step, "step_s": step_s, "gen_s": stage_s["gen"],
                      "gen_score_s": stage_s["gen_score"], "update_s": step_s - stage_s["gen_score"]})

    class EvalCallback(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if args.eval_every <= 0:
                return
            if state.global_step % args.eval_every and state.global_step != args.max_steps:
                return
            clock["train_s"] += time.time() - clock["since"]
            acc = greedy_accuracy(kwargs["model"], tokenizer, val_rows)
            if clock["hit"] is None and acc >= args.target:
                clock["hit"] = clock["train_s"] / 60
            emit({"step": state.global_step, "val_acc": acc, "train_min": clock["train_s"] / 60})
            clock["since"] = time.time()

    if args.eval_every > 0:
        emit({"step": 0, "val_acc": greedy_accuracy(model, tokenizer, val_rows), "train_min": 0.0})
    optional = {
        "weight_decay": args.weight_decay,
        "lr_scheduler_type": args.lr_scheduler_type,
        "gradient_checkpointing": None if args.gradient_checkpointing is None else args.gradient_checkpointing == "true",
    }
    config = GRPOConfig(
        output_dir=str(Path(args.cache_dir) / "trl_grpo_out"), per_device_train_batch_size=args.prompts * args.n,
        num_generations=args.n, max_completion_length=args.response_length, learning_rate=args.learning_rate,
        beta=0.0, temperature=1.0, use_cpu=True, use_vllm=False, bf16=args.bf16, report_to="none",
        max_steps=args.max_steps, logging_steps=1, save_strategy="no", seed=args.seed,
        generation_kwargs={"min_new_tokens": args.response_length} if args.ignore_eos else None,
        **{key: value for key, value in optional.items() if value is not None},
    )
    trainer = GRPOTrainer(model=model, reward_funcs=arithmetic_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[StepTimer(), EvalCallback()])
    timed_method(trainer, "_generate", stage_s, "gen")
    timed_method(trainer, "_generate_and_score_completions", stage_s, "gen_score")
    clock["since"] = time.time()
    trainer.train()
    if args.eval_every <= 0:  # no evaluation callback kept the clock
        clock["train_s"] = time.time() - clock["since"]
    emit({"summary": True, "minutes_to_target": clock["hit"], "target": args.target,
          "train_min": clock["train_s"] / 60, "steps": args.max_steps, "peak_rss_gb": peak_rss_gb()})


if __name__ == "__main__":
    sys.exit(main())
