"""The matmuls of one decode step, three ways: ``F.linear``, oneDNN over a prepacked weight, and fused projections.

Issue 22 item 2 asks whether the rollout's fp32 decode step can beat ``transformers.generate``'s by more than the
work it skips. A decode step is the layers' projections at ``rows`` = the batch (a few dozen) rows; this script times
each projection of a model's layer at those rows: ``F.linear`` (what both engines run), ``mkldnn_linear`` over a
weight reordered once into oneDNN's blocked layout (what the packed output head does for the LM head), and the fused
forms (q, k and v as one product; gate and up as one). Rates near the machine's ``torch.mm`` peak leave no room.

    python scripts/bench/bench_decode_matmuls.py --hidden 576 --intermediate 1536 --heads 9 --kv-heads 3 \
        --rows 16,32,64 --out decode_matmuls.json          # SmolLM2-135M's shapes
    python scripts/bench/bench_decode_matmuls.py --hidden 768 --intermediate 2048 --heads 24 --kv-heads 2   # bench_rollout 100m
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import emit_json, log, matmul_flops, summarize, time_calls  # noqa: E402


def layer_projections(hidden: int, intermediate: int, heads: int, kv_heads: int) -> dict[str, tuple[int, int]]:
    """``{name: (out_features, in_features)}`` of one Llama-style layer, with the fused forms."""
    head_dim = hidden // heads
    kv = kv_heads * head_dim
    return {
        "q_proj": (hidden, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden), "o_proj": (hidden, hidden),
        "qkv_fused": (hidden + 2 * kv, hidden),
        "gate_proj": (intermediate, hidden), "up_proj": (intermediate, hidden), "gate_up_fused": (2 * intermediate, hidden),
        "down_proj": (hidden, intermediate),
    }


def time_projection(rows: int, out_features: int, in_features: int, repeats: int) -> dict[str, Any]:
    """Median seconds of ``[rows, in] × [out, in]ᵀ`` with ``F.linear`` and with the prepacked oneDNN product."""
    import torch

    weight, x = torch.randn(out_features, in_features), torch.randn(rows, in_features)
    packed = weight.to_mkldnn()
    plain = summarize(time_calls(lambda: torch.nn.functional.linear(x, weight), repeats, warmup=3))["median"]
    onednn = summarize(time_calls(
        lambda: torch._C._nn.mkldnn_linear(x.to_mkldnn(), packed, None).to_dense(), repeats, warmup=3))["median"]
    flops = matmul_flops(rows, out_features, in_features)
    return {"rows": rows, "out": out_features, "in": in_features, "linear_s": plain, "packed_s": onednn,
            "packed_speedup": plain / onednn, "linear_gflops": flops / plain / 1e9}


def step_totals(records: list[dict[str, Any]], rows: int) -> dict[str, float]:
    """Seconds of one layer's projections at ``rows``: separate ``F.linear``, all packed, and fused ``F.linear``."""
    at = {r["name"]: r for r in records if r["rows"] == rows}
    separate = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    fused = ("qkv_fused", "o_proj", "gate_up_fused", "down_proj")
    return {
        "rows": rows,
        "linear_s": sum(at[n]["linear_s"] for n in separate),
        "packed_s": sum(at[n]["packed_s"] for n in separate),
        "fused_linear_s": sum(at[n]["linear_s"] for n in fused),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--rows", default="16,32,64", help="decode batch sizes (comma-separated)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    shapes = layer_projections(args.hidden, args.intermediate, args.heads, args.kv_heads)
    rows_list = [int(r) for r in args.rows.split(",")]
    records = []
    for rows in rows_list:
        for name, (out_features, in_features) in shapes.items():
            record = {"name": name, **time_projection(rows, out_features, in_features, args.repeats)}
            log(f"rows {rows:3d} {name:14s} F.linear {record['linear_s'] * 1e6:7.0f} us "
                f"({record['linear_gflops']:5.1f} GFLOP/s)  packed x{record['packed_speedup']:.2f}")
            records.append(record)
    result = {"benchmark": "decode_matmuls", "threads": args.threads, "shapes": shapes, "records": records,
              "layer_totals": [step_totals(records, rows) for rows in rows_list]}
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
