"""The single controller's own cost per GRPO step (dispatch, serialisation, Ray) and 1 vs 2 workers.

Two measurements, both on this machine in one run:

1. **dispatch** — a worker group of :class:`NoopWorker` (methods named and registered like
   ``ActorRolloutRefWorker``'s, ``DP_COMPUTE_PROTO``, doing no work but returning outputs of the real
   shapes) receives the DataProtos of one GRPO step with the step's real sizes (B = prompts × n rows,
   prompt length P, response length R, the trainer's tensor and non-tensor keys). The median round trip
   of each call, summed over the step's calls (generate_sequences, [compute_log_prob], [compute_ref_log_prob],
   update_actor), is the controller's overhead per step on 1 and on 2 workers. The real steps use the
   quickstart's settings (``recompute_old_log_prob=False``: no compute_log_prob call; ``--recompute-old-log-prob``
   and ``--with-ref`` add the calls).
2. **real steps** — ``main_ppo`` (GRPO, hf rollout, FSDP2 actor) for a few steps on 1 and 2 workers;
   ``timing_s/step`` medians (first step dropped) from the file logger, and the overhead the trainer's
   own timers show for generation: ``timing_s/gen − timing_s/generate_sequences − timing_s/weight_sync``
   (driver-side call time minus the time the workers reported inside the method).

Overhead share = dispatch overhead per step / real step time (same number of workers).

    python scripts/bench/bench_controller.py --models tiny --steps 4 --out controller.json
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from figures import emit_json, headline, log, median, ratio, summarize, time_calls  # noqa: E402

from hybridrl.protocol import DataProto  # noqa: E402
from hybridrl.single_controller.base import Worker  # noqa: E402
from hybridrl.single_controller.base.decorator import Dispatch, register  # noqa: E402

_UPDATE_METRICS = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower",
                   "actor/grad_norm", "actor/lr", "perf/max_memory_allocated_gb", "perf/cpu_memory_used_gb")


class NoopWorker(Worker):
    """``ActorRolloutRefWorker``'s RPC surface without the model: outputs of the right shapes, zeros."""

    def __init__(self, response_length: int) -> None:
        super().__init__()
        self.response_length = response_length

    def _per_token(self, rows: int, *keys: str) -> DataProto:
        return DataProto.from_dict(tensors={key: torch.zeros(rows, self.response_length) for key in keys})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """prompts [b, P] → prompts, responses, input_ids, attention_mask, position_ids, rollout_log_probs."""
        ids = prompts.batch["input_ids"]
        rows, response = ids.shape[0], torch.zeros(ids.shape[0], self.response_length, dtype=ids.dtype)
        full = torch.cat([ids, response], dim=1)
        tensors = {"prompts": ids, "responses": response, "input_ids": full, "attention_mask": torch.ones_like(full),
                   "position_ids": torch.arange(full.shape[1]).expand(rows, -1).clone(),
                   "rollout_log_probs": torch.zeros(rows, self.response_length)}
        return DataProto.from_dict(tensors=tensors, meta_info={"timing": {"generate_sequences": 0.0}})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        return self._per_token(len(data), "old_log_probs", "entropys")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        return self._per_token(len(data), "ref_log_prob")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        return DataProto(meta_info={"metrics": {key: [0.0] for key in _UPDATE_METRICS}})


# ----------------------------------------------------------------------------- the step's DataProtos


def object_array(values: list) -> np.ndarray:
    """A 1-D object array (the dataset's collate: lists stay lists instead of becoming a 2-D array)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def step_batches(rows: int, prompt_len: int, response_len: int, seed: int = 0) -> dict[str, DataProto]:
    """The DataProtos a GRPO step sends, with the trainer's keys: ``gen`` (generate_sequences' input) and
    ``full`` (what compute_log_prob / compute_ref_log_prob / update_actor receive), ``rows`` = prompts × n."""
    gen = torch.Generator().manual_seed(seed)
    total = prompt_len + response_len
    prompt_ids = torch.randint(0, 50000, (rows, prompt_len), generator=gen)
    ones_p = torch.ones(rows, prompt_len, dtype=torch.long)
    gen_batch = DataProto.from_dict(
        tensors={"input_ids": prompt_ids, "attention_mask": ones_p,
                 "position_ids": torch.arange(prompt_len).expand(rows, -1).clone()},
        non_tensors={"raw_prompt_ids": object_array([list(range(prompt_len)) for _ in range(rows)]),
                     "tools_kwargs": object_array([{} for _ in range(rows)]),
                     "interaction_kwargs": object_array([{} for _ in range(rows)])},
        meta_info={"eos_token_id": 2, "pad_token_id": 0, "do_sample": True, "temperature": 1.0},
    )
    per_token = {key: torch.randn(rows, response_len, generator=gen)
                 for key in ("response_mask", "token_level_scores", "token_level_rewards", "advantages", "returns",
                             "old_log_probs", "rollout_log_probs")}
    full_ids = torch.randint(0, 50000, (rows, total), generator=gen)
    full = DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": full_ids[:, prompt_len:], "input_ids": full_ids,
                 "attention_mask": torch.ones(rows, total, dtype=torch.long),
                 "position_ids": torch.arange(total).expand(rows, -1).clone(), **per_token},
        non_tensors={key: object_array(values) for key, values in {
            "data_source": ["arithmetic"] * rows, "ability": ["math"] * rows, "index": list(range(rows)),
            "uid": [f"{i // 8:032x}" for i in range(rows)],
            "prompt": [[{"role": "user", "content": f"What is {i} + {i}? Answer with just the number."}]
                       for i in range(rows)],
            "reward_model": [{"ground_truth": str(2 * i), "style": "rule"} for i in range(rows)],
            "extra_info": [{"index": i, "split": "train"} for i in range(rows)],
        }.items()},
        meta_info={"global_token_num": [total] * rows, "temperature": 1.0},
    )
    return {"gen": gen_batch, "full": full}


def payload_mb(data: DataProto) -> float:
    """Pickled size of a DataProto in MB (what Ray serialises per call, before chunking)."""
    return len(pickle.dumps(data)) / 1e6


# ----------------------------------------------------------------------------- dispatch


def step_calls(batches: dict[str, DataProto], with_ref: bool, with_old_log_prob: bool) -> dict[str, DataProto]:
    """The worker calls of one GRPO step and their inputs, in the trainer's order."""
    calls = {"generate_sequences": batches["gen"]}
    if with_old_log_prob:
        calls["compute_log_prob"] = batches["full"]
    if with_ref:
        calls["compute_ref_log_prob"] = batches["full"]
    calls["update_actor"] = batches["full"]
    return calls


def bench_dispatch(workers: int, calls: dict[str, DataProto], response_len: int, repeats: int) -> dict[str, Any]:
    """Median round trip of each step call on a NoopWorker group of ``workers`` ranks."""
    import ray

    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool([workers], use_gpu=False, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(NoopWorker), response_len),
                           name_prefix=f"noop{workers}_")
    try:
        per_call = {name: summarize(time_calls(lambda n=name, d=data: getattr(group, n)(d), repeats, warmup=2))
                    for name, data in calls.items()}
    finally:
        group.kill()
        pool.release()
    return {"workers": workers, "calls": per_call, "step_overhead_s": sum(s["median"] for s in per_call.values())}


# ----------------------------------------------------------------------------- real steps


def bench_real_steps(model: str, workers: int, args: argparse.Namespace, out_root: str) -> dict[str, Any]:
    """A few main_ppo steps; step time medians (first step dropped) and the gen-call overhead the timers show."""
    from hybridrl_runs import GRPOShape, main_ppo_overrides, quickstart_assets, run_main_ppo

    model_dir, data_dir = quickstart_assets(model, args.cache_dir)
    shape = GRPOShape(prompts=args.prompts, n=args.n, response_length=args.response_len,
                      prompt_length=args.prompt_len, recompute_old_log_prob=args.recompute_old_log_prob)
    out_dir = os.path.join(out_root, f"{model}_w{workers}")
    threads = max(1, args.cores // workers)
    run = run_main_ppo(main_ppo_overrides(model_dir, data_dir, shape, args.steps, workers, out_dir), out_dir, threads)
    if run.returncode != 0:
        return {"model": model, "workers": workers, "error": f"main_ppo exit {run.returncode}", "tail": run.tail}
    steps = run.train_step_seconds()
    kept = [seconds for step, seconds in steps.items() if step > 1] or list(steps.values())
    gen_overhead = [
        data["timing_s/gen"] - data.get("timing_s/generate_sequences", 0.0) - data.get("timing_s/weight_sync", 0.0)
        for step, data in run.metrics.items() if step > 1 and "timing_s/gen" in data
    ]
    stages = run.stage_medians()
    return {
        "model": model, "workers": workers, "threads_per_worker": threads, "wall_s": run.wall_s,
        "step_s": summarize(kept), "samples_per_s": shape.samples_per_step / median(kept),
        "gen_call_overhead_s": median(gen_overhead) if gen_overhead else None, "stage_medians_s": stages,
    }


# ----------------------------------------------------------------------------- main


def headlines(dispatch: dict[int, dict], real: list[dict]) -> list[dict]:
    rows = []
    for record in real:
        if "error" in record:
            continue
        overhead = dispatch.get(record["workers"], {}).get("step_overhead_s")
        share = ratio(overhead, record["step_s"]["median"])
        rows.append(headline("controller", f"{record['model']} {record['workers']} worker(s): dispatch overhead "
                             "share of step", share, "share of step time", target=0.10, target_on="value",
                             higher_is_better=False,
                             note=f"{overhead:.3f} s of {record['step_s']['median']:.2f} s"))
    by_model: dict[str, dict[int, dict]] = {}
    for record in real:
        if "error" not in record:
            by_model.setdefault(record["model"], {})[record["workers"]] = record
    for model, runs in by_model.items():
        if 1 in runs and 2 in runs:
            rows.append(headline("controller", f"{model}: 2 workers vs 1 (samples/s)", runs[2]["samples_per_s"],
                                 "samples/s", "1 worker", runs[1]["samples_per_s"]))
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny", help="real steps on: tiny and/or smollm2 ('' to skip)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--steps", type=int, default=5, help="real main_ppo steps per run (first one dropped)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--response-len", type=int, default=16)
    parser.add_argument("--with-ref", action="store_true", help="also dispatch compute_ref_log_prob (KL runs)")
    parser.add_argument("--recompute-old-log-prob", action="store_true",
                        help="the step runs compute_log_prob (verl's default; the quickstart skips it)")
    parser.add_argument("--repeats", type=int, default=20, help="dispatch round trips per call")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="threads shared by the workers")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~/.cache"), "hybridrl"))
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import ray

    workers = [int(w) for w in args.workers.split(",") if w]
    rows = args.prompts * args.n
    batches = step_batches(rows, args.prompt_len, args.response_len)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=max(4, 2 * max(workers)), include_dashboard=False, log_to_driver=False)
    try:
        calls = step_calls(batches, args.with_ref, args.recompute_old_log_prob)
        dispatch = {w: bench_dispatch(w, calls, args.response_len, args.repeats) for w in workers}
    finally:
        ray.shutdown()
    for w, record in dispatch.items():
        log(f"dispatch {w} worker(s): {record['step_overhead_s'] * 1000:.1f} ms per step "
            + ", ".join(f"{k} {v['median'] * 1000:.1f} ms" for k, v in record["calls"].items()))
    real = []
    with tempfile.TemporaryDirectory() as out_root:
        for model in [m for m in args.models.split(",") if m]:
            for w in workers:
                real.append(bench_real_steps(model, w, args, out_root))
                log(f"real {model} {w} worker(s): {real[-1].get('step_s', real[-1].get('error'))}")
    result = {
        "benchmark": "controller",
        "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"rows": rows},
        "payload_mb": {name: payload_mb(data) for name, data in batches.items()},
        "dispatch": list(dispatch.values()),
        "real_steps": real,
        "headline": headlines(dispatch, real),
    }
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
