"""Scaling curves: GRPO step time per stage and peak memory per worker, hybridrl vs TRL, as the response
length R grows (at group size ``--base-n``) and as the group size n grows (at length ``--base-length``).

Each point runs both sides through ``bench_grpo_vs_trl.py``'s runners (hybridrl ``main_ppo`` on one worker,
TRL ``GRPOTrainer`` via ``trl_grpo_quickstart.py``; fp32, same model, prompts, optimizer and threads) with
every completion forced to exactly R tokens (hybridrl ``rollout.min_tokens=R``, TRL ``min_new_tokens=R``),
so the curves follow R and not where the model happens to stop. The two sides alternate their order from
point to point. hybridrl runs its forward/backward in micro-batches of ``--micro`` rows, TRL over the whole
step's batch (its GRPOTrainer setting here), which shows in the memory curves. Per side and point:

- s/step (median, first step dropped) split by stage — hybridrl: ``timing_s/gen``, ``old_log_prob`` and
  ``ref`` when they run, ``update_actor`` and the rest (reward, advantages, balancing); TRL: its
  ``generate`` calls, the rest of ``_generate_and_score_completions`` (decode, reward, advantages) and the
  update (forward, backward, optimizer);
- peak resident memory (``VmHWM``) of the worker process: hybridrl's Ray actor ``ray::WorkerDict`` (actor and
  rollout share it), its driver ``ray::TaskRunner`` apart; TRL's single process (``ru_maxrss``).

For every stage a least-squares slope of log(seconds) over log(x) says how it grows: ~0 flat (fixed cost
dominates), ~1 linear, ~2 quadratic; ``tail_slope`` uses the last two points only (where fixed costs matter
least). For memory the slope of the increment over the first point is given too (``delta_slope``: what the
sequences add above model, optimizer and runtime).

Output: JSON (``records``, ``slopes``, ``headline`` rows) and, with matplotlib, two PNGs in ``--plot-dir``:
``scaling_response_length.png`` and ``scaling_group_size.png`` (left: s/step per stage, log-log; right: peak
RSS per worker).

    python scripts/bench/bench_scaling.py --model smollm2 --steps 3 --lengths 16,64,256,1024 --ns 4,8,16 \\
        --trl-python .venv-trl/bin/python --out outputs/bench/scaling.json --plot-dir docs/images
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_grpo_vs_trl import add_rates, run_hybridrl, run_trl  # noqa: E402
from figures import emit_json, headline, log  # noqa: E402
from hybridrl_runs import GRPOShape, quickstart_assets  # noqa: E402
from peak_memory import PeakMemory, worker_peak_gb  # noqa: E402

HYBRID_WORKER, HYBRID_DRIVER = "ray::WorkerDict", "ray::TaskRunner"
SIDES = ("hybridrl", "trl")
SWEEPS = {"response_length": "response length R (tokens)", "n": "group size n (completions per prompt)"}


def sweep_points(lengths: list[int], ns: list[int], base_n: int, base_length: int) -> list[dict[str, Any]]:
    """Unique ``{"response_length", "n", "sweeps"}`` points: the R sweep at ``base_n``, the n sweep at ``base_length``."""
    points: dict[tuple[int, int], set[str]] = {}
    for length in lengths:
        points.setdefault((length, base_n), set()).add("response_length")
    for n in ns:
        points.setdefault((base_length, n), set()).add("n")
    return [{"response_length": r, "n": n, "sweeps": sorted(s)} for (r, n), s in points.items()]


def micro_batch(requested: int, samples: int, row_tokens: int = 0, max_tokens: int = 0) -> int:
    """hybridrl's micro-batch: ``requested`` when it divides the ``samples`` of a step, else their gcd; with
    ``max_tokens > 0``, halved while ``micro × row_tokens`` (prompt + response slots) exceeds it (at least 1)."""
    micro = requested if samples % requested == 0 else math.gcd(requested, samples)
    while max_tokens > 0 and micro > 1 and micro * row_tokens > max_tokens and samples % (micro // 2) == 0:
        micro //= 2
    return micro


def hybrid_stages(record: dict) -> dict[str, float]:
    """``{gen, old_log_prob?, ref?, update, other, step}`` seconds of a finished hybridrl side."""
    med = record.get("stage_medians_s", {})
    step = record["step_s"]["median"]
    stages = {"gen": med.get("gen", 0.0), "update": med.get("update_actor", 0.0)}
    stages.update({key: med[key] for key in ("old_log_prob", "ref") if key in med})
    stages["other"] = max(step - sum(stages.values()), 0.0)
    return {**stages, "step": step}


def trl_stages(record: dict) -> dict[str, float]:
    """``{gen, update, other, step}`` seconds of a finished TRL side (other: decode, reward, advantages)."""
    med = record.get("stage_medians_s", {})
    step = record["step_s"]["median"]
    gen, gen_score = med.get("gen", 0.0), med.get("gen_score", 0.0)
    return {"gen": gen, "update": med.get("update", step - gen_score), "other": max(gen_score - gen, 0.0),
            "step": step}


def run_side(name: str, run: Any, samples: int) -> dict:
    """One side of one point under the memory sampler: rates, stages and the processes' peak RSS."""
    with PeakMemory() as memory:
        record = add_rates(run(), samples)
    processes = memory.processes()
    record["processes"] = processes[:8]
    if "error" in record:
        return record
    if name == "hybridrl":
        record["stages_s"] = hybrid_stages(record)
        record["worker_peak_rss_gb"] = worker_peak_gb(processes, HYBRID_WORKER)
        record["driver_peak_rss_gb"] = worker_peak_gb(processes, HYBRID_DRIVER)
    else:
        record["stages_s"] = trl_stages(record)
        record["worker_peak_rss_gb"] = record.get("peak_rss_gb") or worker_peak_gb(processes, "trl_grpo_quickstart")
    return record


def bench_point(point: dict, index: int, model_dir: str, data_dir: str, args: argparse.Namespace,
                out_root: str) -> dict:
    """Both sides at one ``(R, n)``; even points run hybridrl first, odd ones TRL first."""
    r, n = point["response_length"], point["n"]
    samples = args.prompts * n
    shape = GRPOShape(prompts=args.prompts, n=n, response_length=r, lr=args.lr, weight_decay=0.0, seed=args.seed)
    shape = replace(shape, micro=micro_batch(args.micro, samples, shape.prompt_length + r, args.micro_tokens))
    out_dir = os.path.join(out_root, f"R{r}_n{n}")
    sides = {
        # no stop token before R on either side (TRL: min_new_tokens), so both generate and train R tokens a row;
        # ignore_eos would generate R but train up to the first EOS (the response mask ends there, as in verl)
        "hybridrl": lambda: run_hybridrl(model_dir, data_dir, shape, args, out_dir, "fp32",
                                         {"actor_rollout_ref.rollout.min_tokens": r}),
        "trl": lambda: run_trl(model_dir, shape, args, out_dir + "_trl", "fp32", ["--ignore_eos"]),
    }
    order = tuple(side for side in (("hybridrl", "trl") if index % 2 == 0 else ("trl", "hybridrl"))
                  if side in args.sides)
    record = {**point, "samples_per_step": samples, "micro": shape.micro, "order": list(order)}
    for side in order:
        log(f"R={r} n={n}: {side}, {args.steps} steps of {samples} samples")
        record[side] = run_side(side, sides[side], samples)
        result = record[side]
        log(f"R={r} n={n}: {side} wall {result.get('wall_s', 0):.1f} s, "
            f"{result.get('stages_s', result.get('error'))}, worker peak {result.get('worker_peak_rss_gb')} GiB")
    return record


def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) over log(x) on the points with x, y > 0 (None with fewer than 2)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def growth_label(slope: float | None) -> str:
    """Words for a log-log slope: decreasing (noise), flat, sublinear, linear, between, quadratic, superquadratic."""
    if slope is None:
        return "unknown (fewer than 2 points)"
    if slope < -0.3:
        return "decreasing (noise or load changes: rerun with more steps on a quiet machine)"
    for bound, label in ((0.3, "flat (fixed cost dominates)"), (0.75, "sublinear"), (1.35, "linear"),
                         (1.75, "between linear and quadratic"), (2.5, "quadratic")):
        if slope < bound:
            return label
    return "superquadratic"


def series(records: list[dict], sweep: str, side: str, value: Any) -> tuple[list[float], list[float]]:
    """``(xs, ys)`` of one side along one sweep; ``value(side_record)`` gives y (None skips the point)."""
    rows = sorted((r for r in records if sweep in r["sweeps"]), key=lambda r: r[sweep])
    pairs = [(r[sweep], value(r[side])) for r in rows if "error" not in r[side]]
    pairs = [(x, y) for x, y in pairs if y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def fit(xs: list[float], ys: list[float]) -> dict[str, Any]:
    """Whole-range and last-two-points slopes with their labels."""
    slope, tail = loglog_slope(xs, ys), loglog_slope(xs[-2:], ys[-2:])
    return {"x": xs, "y": ys, "slope": slope, "growth": growth_label(slope), "tail_slope": tail,
            "tail_growth": growth_label(tail)}


def slopes(records: list[dict], sides: tuple[str, ...] = SIDES) -> dict[str, Any]:
    """``{sweep: {side: {stage | "peak_rss_gb": fit}}}`` for both sweeps and the ``sides`` that ran."""
    out: dict[str, Any] = {}
    for sweep in SWEEPS:
        for side in sides:
            stages = sorted({k for r in records if sweep in r["sweeps"] for k in r[side].get("stages_s", {})})
            fits = {stage: fit(*series(records, sweep, side, lambda s, k=stage: s["stages_s"].get(k)))
                    for stage in stages}
            xs, ys = series(records, sweep, side, lambda s: s.get("worker_peak_rss_gb"))
            memory = fit(xs, ys)
            if len(ys) >= 3:
                memory["delta_slope"] = loglog_slope(xs[1:], [y - ys[0] for y in ys[1:]])
                memory["delta_growth"] = growth_label(memory["delta_slope"])
            fits["peak_rss_gb"] = memory
            out.setdefault(sweep, {})[side] = fits
    return out


def print_slopes(fits: dict[str, Any]) -> None:
    """One stderr line per sweep, side and stage: slope, tail slope and the words for them."""
    for sweep, sides in fits.items():
        for side, stages in sides.items():
            for stage, f in stages.items():
                slope = "–" if f["slope"] is None else f"{f['slope']:.2f}"
                tail = "–" if f["tail_slope"] is None else f"{f['tail_slope']:.2f}"
                extra = f", increment slope {f['delta_slope']:.2f} ({f['delta_growth']})" if f.get("delta_slope") else ""
                log(f"{sweep:>15} {side:>8} {stage:>13}: slope {slope} ({f['growth']}), last two {tail}{extra}")


def headlines(records: list[dict]) -> list[dict]:
    """Per point: s/step and worker peak RSS, hybridrl against TRL (lower is better for both)."""
    rows = []
    for r in records:
        tag = f"R={r['response_length']} n={r['n']} ({r['samples_per_step']} samples/step)"
        h, t = r.get("hybridrl", {}), r.get("trl", {})
        rows.append(headline("scaling", f"{tag}: s/step", h.get("stages_s", {}).get("step"), "s", "TRL GRPOTrainer",
                             t.get("stages_s", {}).get("step"), higher_is_better=False))
        rows.append(headline("scaling", f"{tag}: worker peak RSS", h.get("worker_peak_rss_gb"), "GiB",
                             "TRL GRPOTrainer", t.get("worker_peak_rss_gb"), higher_is_better=False))
    return rows


def parse_list(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item.strip()]


def default_trl_python() -> str:
    """``.venv-trl/bin/python`` of the checkout when present (as run_all.py), else this interpreter."""
    candidate = ROOT / ".venv-trl" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", choices=("tiny", "smollm2"))
    parser.add_argument("--steps", type=int, default=3, help="steps per side and point (the first is dropped)")
    parser.add_argument("--lengths", default="16,64,256,1024", help="response lengths of the R sweep")
    parser.add_argument("--ns", default="4,8,16", help="group sizes of the n sweep")
    parser.add_argument("--base-n", type=int, default=8, help="group size of the R sweep")
    parser.add_argument("--base-length", type=int, default=64, help="response length of the n sweep")
    parser.add_argument("--prompts", type=int, default=2,
                        help="prompts per step (samples = prompts × n; 2 keeps TRL's whole-batch logits at R=1024 "
                             "within a 24 GiB machine)")
    parser.add_argument("--micro", type=int, default=8,
                        help="hybridrl micro-batch (gcd with the batch if needed; TRL takes the whole batch at once)")
    parser.add_argument("--micro-tokens", type=int, default=8192,
                        help="halve hybridrl's micro-batch while it holds more prompt + response slots than this "
                             "(0: off). At 8 rows of 64 + 1024 tokens the fp32 update needs ~21 GB, which Ray's "
                             "memory monitor kills on a 24 GiB machine; TRL has no such cap here")
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads, both sides")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trl-python", default=default_trl_python(), help="python with trl installed")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="which sides run (comma list of hybridrl, trl): e.g. re-measure one after a change")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds per side and point")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~/.cache"), "hybridrl"))
    parser.add_argument("--out", default=None, help="JSON file (also printed to stdout)")
    parser.add_argument("--plot-dir", default=None, help="PNG folder (default: beside --out, else outputs/bench)")
    args = parser.parse_args(argv)
    requested = [side for side in args.sides.split(",") if side]
    if not requested or set(requested) - set(SIDES):
        parser.error(f"--sides {args.sides!r}: a comma list of {', '.join(SIDES)}")
    args.sides = tuple(side for side in SIDES if side in requested)
    # bench_grpo_vs_trl's runners read these
    args.val_every, args.target, args.recompute_old_log_prob = 0, 0.727, False
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from scaling_plots import plot_sweeps  # matplotlib is imported there, lazily

    args = parse_args(argv)
    points = sweep_points(parse_list(args.lengths), parse_list(args.ns), args.base_n, args.base_length)
    model_dir, data_dir = quickstart_assets(args.model, args.cache_dir)
    log(f"{len(points)} points × 2 sides on {args.model}: {[(p['response_length'], p['n']) for p in points]}")
    with tempfile.TemporaryDirectory() as out_root:
        records = [bench_point(point, i, model_dir, data_dir, args, out_root) for i, point in enumerate(points)]
    fits = slopes(records, args.sides)
    print_slopes(fits)
    plot_dir = Path(args.plot_dir or (Path(args.out).parent if args.out else ROOT / "outputs" / "bench"))
    plots = plot_sweeps(records, fits, SWEEPS, plot_dir, title=f"{args.model}, {args.prompts} prompts/step, fp32")
    result = {"benchmark": "scaling", "settings": {k: v for k, v in vars(args).items() if k != "out"},
              "model_dir": model_dir, "records": records, "slopes": fits, "plots": plots,
              "headline": headlines(records)}
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
