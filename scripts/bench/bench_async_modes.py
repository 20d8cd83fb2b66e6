"""sync vs separate_async on CPU: trainer idle seconds and wall seconds per step (issue 19).

Same GRPO run (tiny model, quickstart arithmetic data, hf rollout) three ways:

    sync            trainer.v1.trainer_mode=sync, 1 hybrid-engine process (generate, then train, in turn)
    sync_2proc      sync on 2 data-parallel processes (the same process count as separate_async)
    separate_async  1 actor process + 1 rollout process (rollout.nnodes=1, n_gpus_per_node=1), weights pushed
                    every step (parameter_sync_step=1), one batch ahead, threshold 1

Trainer idle per step: sync: ``timing_s/gen`` (the trainer waits while the batch is generated);
separate_async: ``async/trainer_idle_s`` (the driver waits for a batch the rollout pool has not finished).
Medians over the steps after the first. On a 2-core machine the processes share the cores, so the wall-clock
gain is bounded; the idle-time figures show what overlap buys. JSON to stdout.

    python scripts/bench/bench_async_modes.py --steps 6 [--modes sync,separate_async,sync_2proc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import emit_json, log  # noqa: E402
from hybridrl_runs import GRPOShape, PPORun, main_ppo_overrides, quickstart_assets, run_main_ppo  # noqa: E402

SEPARATE = {
    "trainer.v1.trainer_mode": "separate_async",
    "trainer.v1.separate_async.parameter_sync_step": 1,
    "trainer.v1.separate_async.num_warmup_batches": 1,
    "trainer.v1.sampler.max_off_policy_threshold": 1,
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.n_gpus_per_node": 1,
}


def _median_after_first(series: dict[int, float]) -> float | None:
    kept = [value for step, value in series.items() if step >= 2] or list(series.values())
    return statistics.median(kept) if kept else None


def summarize_run(run: PPORun, idle_key: str) -> dict[str, object]:
    """Median trainer idle s/step, wall s/step (validation and checkpoints excluded), staleness seen."""
    if run.returncode != 0:
        return {"error": run.tail}
    staleness = run.series("training/off_policy/trajectory_staleness/max")
    return {
        "trainer_idle_s_per_step": _median_after_first(run.series(idle_key)),
        "wall_s_per_step": _median_after_first(run.train_step_seconds()),
        "gen_s_per_step": _median_after_first(run.series("timing_s/gen")),
        "update_actor_s_per_step": _median_after_first(run.series("timing_s/update_actor")),
        "weight_publish_s_per_step": _median_after_first(run.series("async/weight_publish_s")),
        "max_staleness": max(staleness.values()) if staleness else 0,
        "run_wall_s": run.wall_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="OMP threads per worker process")
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--modes", default="sync,separate_async", help="comma-separated: sync, separate_async, sync_2proc")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    model_dir, data_dir = quickstart_assets("tiny")
    shape = GRPOShape(prompts=4, n=4, response_length=args.response_length, micro=16)
    half_micro = {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": shape.micro // 2,
                  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": shape.micro // 2}
    known = {"sync": (1, {}), "separate_async": (1, SEPARATE), "sync_2proc": (2, half_micro)}
    runs = {name: known[name] for name in args.modes.split(",")}
    result: dict[str, object] = {"steps": args.steps, "samples_per_step": shape.samples_per_step,
                                 "threads_per_process": args.threads, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (workers, extra) in runs.items():
            log(f"[bench_async_modes] {name} ...")
            out_dir = os.path.join(tmp, name)
            overrides = main_ppo_overrides(model_dir, data_dir, shape, args.steps, workers, out_dir, extra=extra)
            run = run_main_ppo(overrides, out_dir, threads=args.threads)
            idle_key = "async/trainer_idle_s" if name == "separate_async" else "timing_s/gen"
            result[name] = summarize_run(run, idle_key)
    emit_json(result, args.out)


if __name__ == "__main__":
    main()
