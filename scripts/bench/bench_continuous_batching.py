"""Continuous batching throughput: N concurrent requests through the hf async server vs one
``HFRollout.generate_sequences`` call on the same prompts (useful tokens per second).

Useful tokens are the tokens a request asked for: up to and including its EOS, at most its own ``max_tokens``.
Scenarios (all sampled at temperature 1, rollout log-probs on):

- ``full``: ``ignore_eos``, every request wants ``--max-tokens`` tokens (pure decode speed, server overhead shows).
- ``eos``: rows stop on a set of ``--stop-ids`` ids (random-weight model), at different lengths; both sides stop.
- ``mixed``: ``ignore_eos``, request ``i`` wants its own budget in ``[max_tokens/4, max_tokens]`` (agent turns);
  one batched call can only give every row the largest budget, the server stops each at its own.

Median over ``--repeats`` timed runs after a warm-up, the two sides alternating. The JSON goes to stdout (and ``--out``).

    python scripts/bench/bench_continuous_batching.py --model small --requests 32 --max-tokens 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from omegaconf import OmegaConf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import emit_json, log  # noqa: E402

MODELS = {  # random-weight Qwen2 models (as bench_rollout.py)
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2),
    "small": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8),
    "100m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=24),
}
SCENARIOS = ("full", "eos", "mixed")
_WORDS = "please think step by step and give the final number only".split()


def build_model_dir(name: str, root: str) -> str:
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(num_key_value_heads=2 if name != "tiny" else 1, **MODELS[name])
    return str(build_tiny_model(os.path.join(root, name), spec))


def prompt_lists(tokenizer, count: int) -> list[list[int]]:
    """``count`` chat prompts of different lengths, as token ids."""
    prompts = []
    for i in range(count):
        question = f"What is {i} + {2 * i}? " + " ".join(_WORDS[: i % len(_WORDS)])
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


def budgets(scenario: str, count: int, max_tokens: int) -> list[int]:
    """Per-request ``max_tokens``: all equal, or spread over ``[max_tokens/4, max_tokens]`` (``mixed``)."""
    if scenario != "mixed":
        return [max_tokens] * count
    low = max(1, max_tokens // 4)
    return [low + (i * 7919) % (max_tokens - low + 1) for i in range(count)]


def rollout_section(args) -> OmegaConf:
    from hybridrl.utils.config_defaults import section_with_defaults

    cfg = OmegaConf.create(
        {
            "name": "hf",
            "temperature": 1.0,
            "top_k": -1,
            "top_p": 1.0,
            "do_sample": True,
            "response_length": args.max_tokens,
            "dtype": "float32",
            "calculate_log_probs": True,
            "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_prefill_tokens,
        }
    )
    return section_with_defaults(cfg, "actor_rollout_ref.rollout")


def one_batch_call(engine, prompts: list[list[int]], wants: list[int], ignore_eos: bool) -> int:
    """One ``generate_sequences`` call (left-padded batch, response length = the largest budget); useful tokens."""
    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask
    from hybridrl.workers.rollout.hf_rollout import left_pad

    input_ids, mask = left_pad(prompts, engine.pad_token_id, torch.device("cpu"))
    batch = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)},
        meta_info={"response_length": max(wants), "ignore_eos": ignore_eos},
    )
    out = engine.generate_sequences(batch)
    if ignore_eos:  # every row generated its whole budget (the mask would stop at a sampled EOS id)
        return sum(wants)
    valid = out.batch["attention_mask"][:, -max(wants) :].sum(-1).tolist()
    return int(sum(min(v, want) for v, want in zip(valid, wants)))


def server_call(server, prompts: list[list[int]], wants: list[int], ignore_eos: bool) -> int:
    """All requests submitted at once; useful tokens once every one finished."""
    futures = [
        server.submit(f"r{i}", ids, {"max_tokens": want, "ignore_eos": ignore_eos})
        for i, (ids, want) in enumerate(zip(prompts, wants))
    ]
    return sum(len(f.result().token_ids) for f in futures)


def timed_pair(first, second, repeats: int) -> list[tuple[float, int]]:
    """``(median seconds, useful tokens of the last call)`` of two calls timed alternately (one warm-up each),
    so both see the same machine load (this CPU is shared)."""
    first(), second()
    seconds: list[list[float]] = [[], []]
    useful = [0, 0]
    for repeat in range(repeats):
        for k, fn in enumerate((first, second)):
            torch.manual_seed(repeat)
            start = time.perf_counter()
            useful[k] = fn()
            seconds[k].append(time.perf_counter() - start)
    return [(statistics.median(seconds[k]), useful[k]) for k in range(2)]


def bench_scenario(scenario: str, model, tokenizer, args, stop_ids: list[int]) -> dict:
    from hybridrl.workers.rollout.async_server import build_async_server
    from hybridrl.workers.rollout.hf_rollout import HFRollout

    cfg = rollout_section(args)
    eos = [tokenizer.eos_token_id] + (stop_ids if scenario == "eos" else [])
    engine = HFRollout(model, cfg, eos_token_ids=eos, pad_token_id=tokenizer.pad_token_id)
    prompts = prompt_lists(tokenizer, args.requests)
    wants = budgets(scenario, args.requests, args.max_tokens)
    ignore_eos = scenario != "eos"
    server = build_async_server(engine, cfg)
    server.start()
    try:
        (batch_s, batch_useful), (server_s, server_useful) = timed_pair(
            lambda: one_batch_call(engine, prompts, wants, ignore_eos),
            lambda: server_call(server, prompts, wants, ignore_eos),
            args.repeats,
        )
    finally:
        server.stop()
    record = {
        "scenario": scenario,
        "requests": args.requests,
        "one_call_seconds": round(batch_s, 3),
        "one_call_useful_tokens": batch_useful,
        "one_call_useful_tokens_per_s": round(batch_useful / batch_s, 1),
        "server_seconds": round(server_s, 3),
        "server_useful_tokens": server_useful,
        "server_useful_tokens_per_s": round(server_useful / server_s, 1),
    }
    record["server_over_one_call"] = round(
        record["server_useful_tokens_per_s"] / record["one_call_useful_tokens_per_s"], 3
    )
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", choices=sorted(MODELS), help="random-weight model size")
    parser.add_argument("--model-dir", default="", help="a real HF model folder instead (stops on its own EOS)")
    parser.add_argument("--requests", type=int, default=32, help="concurrent requests N")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-num-seqs", type=int, default=1024, help="the server's running-batch cap")
    parser.add_argument("--max-prefill-tokens", type=int, default=8192, help="rollout.max_num_batched_tokens")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop-ids", type=int, default=16, help="extra stop ids of the eos scenario")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = {
        "model": args.model_dir or args.model,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "results": [],
    }
    with tempfile.TemporaryDirectory() as root:
        model_dir = os.path.expanduser(args.model_dir) if args.model_dir else build_model_dir(args.model, root)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        stop_ids = [] if args.model_dir else list(range(100, 100 + args.stop_ids))
        for scenario in args.scenarios.split(","):
            record = bench_scenario(scenario, model, tokenizer, args, stop_ids)
            log(str(record))
            result["results"].append(record)
    emit_json(result, args.out or None)


if __name__ == "__main__":
    main()
