"""Attention forward+backward of one micro-batch: padded vs dense-mask packed vs varlen packed.

A microbenchmark of the part of the model that packing changes, less sensitive to machine load than a whole
update (one thread, small tensors). It uses the batch of ``bench_train.py`` (same lengths for the same
arguments) split into micro-batches, and per micro-batch times, as transformers runs them in a model forward:

    padded         ``create_causal_mask`` (sdpa: a [B, 1, S', S'] mask; S' skips the all-padding columns as the
                   padded forward does) + ``layers`` × SDPA forward+backward on ``[B, H, S', D]``
    packed_dense   ``create_causal_mask`` on the packed row (sdpa: the [1, 1, nnz, nnz] block-diagonal mask)
                   + ``layers`` × SDPA forward+backward on ``[1, H, nnz, D]`` (the path before varlen)
    packed_varlen  ``hybridrl_varlen``: no mask; ``layers`` × per-sequence SDPA forward+backward

Query/key/value are random with the model's heads (GQA: ``--kv-heads``); gradients flow to all three. Variants
are interleaved round-robin per repeat; wall and process CPU time are recorded (one thread: the CPU time hardly
depends on the machine's load). Defaults: SmolLM2-135M's attention (9 heads, 3 kv heads, head dim 64,
30 layers) on bench_train's headline batch (16 rows, P ≤ 64, R ≤ 32, micro-batch 8).

    python scripts/bench/bench_attention.py --threads 1 --dtypes fp32,bf16 --out attention.json
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from bench_train import build_batch  # noqa: E402
from figures import emit_json, headline, log, summarize, time_calls  # noqa: E402

VARIANTS = ("padded", "packed_dense", "packed_varlen")


def model_config(heads: int, kv_heads: int, head_dim: int, attn_implementation: str) -> Any:
    """A Llama config with the benchmark's attention shape (only the mask builder reads it)."""
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, num_hidden_layers=1, vocab_size=64)
    config._attn_implementation = attn_implementation
    return config


def micro_batch_inputs(micro: Any, layout: str) -> dict[str, Any]:
    """``{"attention_mask", "position_ids", "cu_seqlens"}`` of one micro-batch in ``layout``."""
    from hybridrl.utils.remove_padding import all_padding_columns, pack_sequences

    if layout == "padded":
        lead, trail = all_padding_columns(micro["attention_mask"])
        columns = slice(lead, micro["attention_mask"].shape[1] - trail)
        return {"attention_mask": micro["attention_mask"][:, columns],
                "position_ids": micro["position_ids"][:, columns], "cu_seqlens": None}
    packed = pack_sequences(micro["input_ids"], micro["attention_mask"], micro["position_ids"])
    return {"attention_mask": None, "position_ids": packed.position_ids, "cu_seqlens": packed.cu_seqlens}


def attention_call(inputs: dict[str, Any], variant: str, args: argparse.Namespace, dtype: Any) -> Any:
    """A no-argument callable: the mask (if any) + ``args.layers`` attention forward+backward passes."""
    import torch
    from torch import nn
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import create_causal_mask

    from hybridrl.models.transformers.varlen_attention import register_varlen_attention, varlen_attention_forward

    varlen = variant == "packed_varlen"
    config = model_config(args.heads, args.kv_heads, args.head_dim, register_varlen_attention() if varlen else "sdpa")
    position_ids = inputs["position_ids"]
    batch, tokens = position_ids.shape
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(batch, heads, tokens, args.head_dim, generator=gen, dtype=dtype).requires_grad_()
               for heads in (args.heads, args.kv_heads, args.kv_heads)]
    layer = nn.Module()
    layer.is_causal, layer.num_key_value_groups = True, args.heads // args.kv_heads
    attend = varlen_attention_forward if varlen else sdpa_attention_forward
    extra = {"cu_seq_lens_q": inputs["cu_seqlens"]} if varlen else {}

    def call() -> None:
        embeds = torch.empty(batch, tokens, 1, dtype=dtype)  # the mask builder reads its shape, dtype, device
        mask = create_causal_mask(config=config, inputs_embeds=embeds, attention_mask=inputs["attention_mask"],
                                  cache=None, position_ids=position_ids)
        for _ in range(args.layers):
            out, _ = attend(layer, *tensors, mask, scaling=args.head_dim**-0.5, position_ids=position_ids, **extra)
            out.sum().backward()

    return call


def bench_dtype(dtype_name: str, micro_batches: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Median seconds per variant for all micro-batches of one mini-batch (summed), interleaved."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    calls = {variant: [attention_call(micro_batch_inputs(mb, "padded" if variant == "padded" else "packed"),
                                      variant, args, dtype) for mb in micro_batches] for variant in VARIANTS}
    run = {variant: functools.partial(lambda fns: [fn() for fn in fns], fns) for variant, fns in calls.items()}
    for fn in run.values():
        time_calls(fn, repeats=1, warmup=args.warmup)
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    cpu_seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(args.repeats):
        for variant in VARIANTS:
            cpu_start = time.process_time()
            seconds[variant] += time_calls(run[variant], repeats=1, warmup=0)
            cpu_seconds[variant].append(time.process_time() - cpu_start)
    result = {variant: {**summarize(seconds[variant]), "cpu": summarize(cpu_seconds[variant])} for variant in VARIANTS}
    for variant in VARIANTS:
        log(f"{dtype_name} {variant}: median {result[variant]['median'] * 1e3:.1f} ms "
            f"(min {result[variant]['min'] * 1e3:.1f}; CPU {result[variant]['cpu']['median'] * 1e3:.1f})")
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16, help="rows of the mini-batch")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--response-len", type=int, default=32)
    parser.add_argument("--full-share", type=float, default=0.2)
    parser.add_argument("--micro", type=int, default=8, help="rows per micro-batch")
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=30, help="attention calls per micro-batch (model layers)")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    return args


def main(argv: list[str] | None = None) -> dict:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    data = build_batch(args.batch, args.prompt_len, args.response_len, args.full_share, 64, 0, args.seed)
    micro_batches = list(data.batch.split(args.micro))
    tokens = {"valid": int(data.batch["attention_mask"].sum()), "padded_slots": data.batch["attention_mask"].numel()}
    results = {dtype: bench_dtype(dtype, micro_batches, args) for dtype in args.dtypes}
    rows = []
    for dtype, by_variant in results.items():
        for variant in ("packed_dense", "packed_varlen"):
            stats, padded = by_variant[variant], by_variant["padded"]
            rows.append(headline("attention", f"attention fwd+bwd {dtype}: {variant} vs padded",
                                 padded["median"] / stats["median"], "× padded speed (medians)",
                                 note=f"{args.layers} layers; ratio of minimums {padded['min'] / stats['min']:.2f}×, "
                                      f"of CPU times {padded['cpu']['median'] / stats['cpu']['median']:.2f}×"))
    result = {"benchmark": "attention", "args": vars(args), "tokens": tokens, "load_average": os.getloadavg(),
              "results": results, "headlines": rows}
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
