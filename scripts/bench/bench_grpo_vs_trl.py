"""GRPO end to end: hybridrl's ``main_ppo`` vs TRL's ``GRPOTrainer``, same model, prompts and settings.

Both sides train on the quickstart's task (2-digit addition, the same parquet files and reward) with the
same model folder (``tiny``: hybridrl's tiny Qwen2; ``smollm2``: the prepared SmolLM2-135M-Instruct), the
same ``prompts × n`` completions per step, response length, AdamW (lr, weight decay, betas 0.9/0.999,
constant schedule, grad clip 1.0), no KL term (TRL ``beta=0`` / ``use_kl_loss=False``), temperature 1,
the same precision (each ``--precisions`` entry is one pair: ``fp32`` both in fp32; ``bf16`` hybridrl's FSDP
mixed precision ``param_dtype=bf16`` and a bf16 rollout (``rollout.dtype=bfloat16``) against TRL's ``bf16=True``,
whose update and ``generate`` both run under bf16 autocast: bf16 compute over fp32 master weights on both sides;
``--fp32-rollout`` keeps hybridrl's rollout in fp32),
gradient checkpointing off, one optimizer step per generation batch, and the same number of torch
threads (hybridrl: one worker with ``OMP_NUM_THREADS``; TRL: ``torch.set_num_threads``). Each runs as
its own subprocess; per-step wall times come from hybridrl's file logger (``timing_s/step``) and TRL's
step callback. The first step of each is dropped (warm-up); medians over the rest. Pairs alternate their order
(hybridrl–TRL, then TRL–hybridrl) so drift in the machine's load does not favour one side; every
``--response-lens`` entry is one shape (16: the quickstart's; 128: decoding dominates).

Like TRL with one update per generation, hybridrl skips the separate old-log-prob forward
(``actor.recompute_old_log_prob=False``, the quickstart's setting); ``--recompute-old-log-prob`` turns it back on.
hybridrl's update leaves out the rows of groups whose samples all scored alike (advantage 0: no loss, no gradient;
``actor.skip_zero_advantage_rows``, on by default; the records give the share left out per step, which is high at
the start of this task when most groups score 0); ``--no-skip-zero-advantage-rows`` runs every row as TRL does.
As the quickstart, hybridrl's update runs each distinct prompt once for its ``n`` samples
(``model.share_prompt_prefix=True``: the same log-probs and gradients); ``--no-share-prompt-prefix`` turns it off.

With ``--val-every K`` both also report greedy held-out accuracy every K steps and the training minutes
(validation excluded) to reach ``--target`` (the issue's 72.7%).

    python scripts/bench/bench_grpo_vs_trl.py --models smollm2 --response-lens 16,128 --precisions fp32,bf16 \
        --steps 6 --out grpo_vs_trl.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import emit_json, headline, log, median, summarize  # noqa: E402
from hybridrl_runs import GRPOShape, main_ppo_overrides, quickstart_assets, run_main_ppo  # noqa: E402


def drop_warmup(step_seconds: dict[int, float]) -> list[float]:
    """Step times without the first step (or all of them when there is only one)."""
    steps = sorted(step_seconds)
    kept = [step_seconds[s] for s in steps[1:]]
    return kept or [step_seconds[s] for s in steps]


def minutes_to_target(val: dict[int, float], step_seconds: dict[int, float], target: float) -> float | None:
    """Training minutes (sum of step times up to the first validated step reaching ``target``), or None."""
    hit = next((step for step in sorted(val) if val[step] >= target), None)
    if hit is None:
        return None
    return sum(seconds for step, seconds in step_seconds.items() if step <= hit) / 60.0


def hybridrl_settings(args: argparse.Namespace, precision: str, overrides: dict[str, Any] | None = None) -> dict:
    """The Hydra overrides hybridrl's side adds to the quickstart's: TRL's schedule and clipping, the precision pair,
    the zero-advantage skip (``--no-skip-zero-advantage-rows``), then ``overrides``."""
    extra = {"actor_rollout_ref.actor.optim.warmup_style": "constant", "actor_rollout_ref.actor.grad_clip": 1.0}
    if args.no_skip_zero_advantage_rows:  # the config's default skips them
        extra["actor_rollout_ref.actor.skip_zero_advantage_rows"] = False
    if precision != "fp32":  # FSDP mixed precision: bf16 matmuls, fp32 master weights and log-softmax
        extra["+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"] = precision
        if not args.fp32_rollout:  # TRL generates under the same bf16 autocast as its update
            extra["actor_rollout_ref.rollout.dtype"] = "bfloat16"
    return {**extra, **(overrides or {})}


def run_hybridrl(model_dir: str, data_dir: str, shape: GRPOShape, args: argparse.Namespace, out_dir: str,
                 precision: str, overrides: dict[str, Any] | None = None) -> dict:
    """hybridrl main_ppo on one worker; per-step times and (with --val-every) validation accuracy.

    ``overrides``: further Hydra overrides (e.g. ``actor_rollout_ref.rollout.ignore_eos: True``).
    """
    extra = hybridrl_settings(args, precision, overrides)
    overrides = main_ppo_overrides(model_dir, data_dir, shape, args.steps, 1, out_dir, args.val_every, extra)
    run = run_main_ppo(overrides, out_dir, args.threads)
    if run.returncode != 0:
        return {"error": f"main_ppo exit {run.returncode}", "tail": run.tail}
    step_seconds = run.train_step_seconds()
    val = run.series("val-core/arithmetic/reward/mean@1")
    return {"wall_s": run.wall_s, "step_seconds": step_seconds, "val_acc": val, "stage_medians_s": run.stage_medians(),
            "minutes_to_target": minutes_to_target(val, step_seconds, args.target) if val else None,
            # how much the zero-advantage skip left out (it depends on the share of groups whose samples all
            # scored alike, high at the start of this task), and the reward that decides it
            "zero_adv_skipped_frac": run.series("actor/zero_adv_skipped_frac"),
            "score_mean": run.series("critic/score/mean")}


def trl_command(model_dir: str, shape: GRPOShape, args: argparse.Namespace, jsonl: str,
                precision: str = "fp32", extra_args: list[str] | None = None) -> list[str]:
    """The TRL side: ``trl_grpo_quickstart.py`` with hybridrl's settings, its JSON lines into ``jsonl``
    (``extra_args``: further flags of that script, e.g. ``--ignore_eos``)."""
    bf16 = ["--bf16"] if precision == "bf16" else []
    return [
        args.trl_python, str(HERE / "trl_grpo_quickstart.py"), "--cache_dir", args.cache_dir, "--out", jsonl,
        "--model_dir", model_dir, "--max_steps", str(args.steps), "--eval_every", str(args.val_every),
        "--learning_rate", str(shape.lr), "--weight_decay", str(shape.weight_decay),
        "--lr_scheduler_type", "constant", "--gradient_checkpointing", "true" if shape.grad_ckpt else "false",
        "--prompts", str(shape.prompts), "--n", str(shape.n), "--response_length", str(shape.response_length),
        "--seed", str(shape.seed), "--target", str(args.target), "--threads", str(args.threads), "--step_times", *bf16,
        *(extra_args or []),
    ]


def run_trl(model_dir: str, shape: GRPOShape, args: argparse.Namespace, out_dir: str, precision: str,
            extra_args: list[str] | None = None) -> dict:
    """TRL GRPOTrainer in a subprocess; reads the JSON lines it appends to ``out_dir/trl.jsonl``.

    Besides the step times, ``stage_medians_s`` holds the medians (warm-up step dropped) of the stage times
    the script reports per step (``gen``, ``gen_score``, ``update``), and ``peak_rss_gb`` its peak RSS."""
    # the TRL environment does not install hybridrl: the script imports its reward function from this checkout
    python_path = os.pathsep.join(p for p in (str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": python_path, **trl_allocator_env(args.trl_allocator)}
    jsonl = Path(out_dir) / "trl.jsonl"
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    jsonl.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.run(trl_command(model_dir, shape, args, str(jsonl), precision, extra_args), env=env,
                          capture_output=True, text=True, timeout=args.timeout)
    wall_s = time.perf_counter() - start
    if proc.returncode != 0 or not jsonl.exists():
        return {"error": f"TRL exit {proc.returncode}", "tail": proc.stdout[-1500:] + proc.stderr[-3000:]}
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    step_seconds = {row["step"]: row["step_s"] for row in rows if "step_s" in row}
    val = {row["step"]: row["val_acc"] for row in rows if "val_acc" in row}
    summary = next((row for row in rows if row.get("summary")), {})
    return {"wall_s": wall_s, "step_seconds": step_seconds, "val_acc": val, "stage_medians_s": trl_stage_medians(rows),
            "peak_rss_gb": summary.get("peak_rss_gb"),
            "minutes_to_target": minutes_to_target(val, step_seconds, args.target) if val else None,
            "trl_reported_minutes_to_target": summary.get("minutes_to_target")}


def trl_allocator_env(setting: str) -> dict[str, str]:
    """Environment giving the TRL process the host allocator ``setting`` (``system``: as a TRL user runs it)."""
    from hybridrl.utils.cpu_allocator import ENV_KEY, choose_allocator

    return choose_allocator({ENV_KEY: setting}).env


def trl_stage_medians(rows: list[dict]) -> dict[str, float]:
    """Median per stage key (``<stage>_s`` in the step rows) over the steps after the first."""
    steps = [row for row in rows if "step_s" in row]
    kept = steps[1:] or steps
    keys = sorted({key for row in kept for key in row if key.endswith("_s") and key != "step_s"})
    return {key.removesuffix("_s"): median(row[key] for row in kept if key in row) for key in keys}


def add_rates(record: dict, samples_per_step: int) -> dict:
    """Adds step-time stats and samples/s (median step) to a finished side's record."""
    if "error" in record or not record.get("step_seconds"):
        record.setdefault("error", "no step times")
        return record
    stats = summarize(drop_warmup(record["step_seconds"]))
    record.update(step_s=stats, samples_per_s=samples_per_step / stats["median"])
    return record


def bench_model(model: str, response_len: int, args: argparse.Namespace, out_root: str) -> list[dict]:
    """One record per precision pair on one model and response length; the pairs alternate their order."""
    model_dir, data_dir = quickstart_assets(model, args.cache_dir)
    shape = GRPOShape(prompts=args.prompts, n=args.n, response_length=response_len, lr=args.lr,
                      weight_decay=args.weight_decay, micro=args.micro, seed=args.seed,
                      recompute_old_log_prob=args.recompute_old_log_prob,
                      share_prompt_prefix=not args.no_share_prompt_prefix)
    records = []
    for index, precision in enumerate(args.precisions.split(",")):
        tag = f"{model} R={response_len} {precision}"
        out_dir = os.path.join(out_root, f"{model}_{response_len}_{precision}")
        sides = {
            "hybridrl": functools.partial(run_hybridrl, model_dir, data_dir, shape, args, out_dir, precision),
            "trl": functools.partial(run_trl, model_dir, shape, args, out_dir + "_trl", precision),
        }
        order = ("hybridrl", "trl") if index % 2 == 0 else ("trl", "hybridrl")
        results = {}
        for side in order:
            log(f"{tag}: {side}, {args.steps} steps of {shape.samples_per_step} samples")
            results[side] = add_rates(sides[side](), shape.samples_per_step)
            log(f"{tag}: {side} {results[side].get('step_s', results[side].get('error'))}")
        records.append({"model": model, "model_dir": model_dir, "response_length": response_len,
                        "precision": precision, "order": list(order), "samples_per_step": shape.samples_per_step,
                        **results})
    return records


def headlines(records: list[dict]) -> list[dict]:
    rows = []
    for record in records:
        hybrid, trl = record["hybridrl"], record["trl"]
        target = 2.0 if record["model"] == "smollm2" else None  # the target is on SmolLM2-135M
        tag = f"{record['model']} R={record['response_length']} {record['precision']}/{record['precision']}"
        rows.append(headline("grpo_vs_trl", f"{tag}: GRPO samples/s", hybrid.get("samples_per_s"),
                             "samples/s", "TRL GRPOTrainer", trl.get("samples_per_s"), target=target,
                             note=_note(hybrid, trl)))
        if hybrid.get("minutes_to_target") is not None or trl.get("minutes_to_target") is not None:
            rows.append(headline("grpo_vs_trl", f"{tag}: training minutes to target accuracy",
                                 hybrid.get("minutes_to_target"), "min", "TRL GRPOTrainer",
                                 trl.get("minutes_to_target"), target=1.0, higher_is_better=False))
    return rows


def _note(hybrid: dict, trl: dict) -> str:
    parts = []
    for name, side in (("hybridrl", hybrid), ("TRL", trl)):
        parts.append(f"{name} {side['step_s']['median']:.2f} s/step" if "step_s" in side else
                     f"{name}: {side.get('error')}")
    return "; ".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--steps", type=int, default=6, help="steps per side (the first is dropped)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-lens", default="16", help="comma list; one shape each (e.g. 16,128)")
    parser.add_argument("--lr", type=float, default=5e-6, help="both sides (TRL's measured configuration)")
    parser.add_argument("--weight-decay", type=float, default=0.0, help="both sides (TRL's default)")
    parser.add_argument("--micro", type=int, default=32, help="hybridrl micro-batch (TRL: whole batch)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads, both sides")
    parser.add_argument("--recompute-old-log-prob", action="store_true",
                        help="hybridrl: run the separate old-log-prob forward (verl's default)")
    parser.add_argument("--no-skip-zero-advantage-rows", action="store_true",
                        help="hybridrl runs every row in the update (actor.skip_zero_advantage_rows=False)")
    parser.add_argument("--no-share-prompt-prefix", action="store_true",
                        help="hybridrl: run every row's prompt in the update (model.share_prompt_prefix=False)")
    parser.add_argument("--precisions", default="fp32,bf16",
                        help="comma list of equal-precision pairs: fp32 (both fp32), bf16 (both bf16 autocast)")
    parser.add_argument("--fp32-rollout", action="store_true",
                        help="hybridrl: keep the rollout in fp32 in the bf16 pair (rollout.dtype=float32)")
    parser.add_argument("--val-every", type=int, default=0, help="validate every K steps (0: speed only)")
    parser.add_argument("--target", type=float, default=0.727)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trl-python", default=sys.executable, help="python with trl installed")
    parser.add_argument("--trl-allocator", default="system",
                        help="host allocator of the TRL process (HYBRIDRL_CPU_ALLOCATOR values; system: TRL as "
                             "users run it). hybridrl's side uses HYBRIDRL_CPU_ALLOCATOR (default auto)")
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~/.cache"), "hybridrl"))
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as out_root:
        records = [record for model in args.models.split(",") if model
                   for length in args.response_lens.split(",") if length
                   for record in bench_model(model, int(length), args, out_root)]
    from hybridrl.utils.cpu_allocator import choose_allocator

    settings = {**{k: v for k, v in vars(args).items() if k != "out"}, "hybridrl_allocator": choose_allocator().name}
    result = {"benchmark": "grpo_vs_trl", "settings": settings,
              "records": records, "headline": headlines(records)}
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
