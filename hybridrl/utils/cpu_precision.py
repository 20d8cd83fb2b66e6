"""bf16 or fp32 on this CPU, decided by measuring both at a model's own matmul shapes (well under a second).

CPU flags alone do not settle it: without bf16 dot-product units torch emulates bf16 (one to two orders of
magnitude slower, :mod:`hybridrl.utils.cpu_features`), and with them bf16 wins only where the kernels for the
model's shapes are good (AMX Xeons: clearly; ``avx512_bf16`` without AMX: shape by shape). So ``auto`` times the
projections a transformer layer and its LM head run — ``[M, hidden] @ [hidden, hidden]``, ``[M, hidden] @
[hidden, intermediate]``, ``[M, intermediate] @ [intermediate, hidden]``, ``[M, hidden] @ [hidden, vocab]`` — in
both precisions, for the two regimes that matter: a training micro-batch (many tokens per matmul) and a decode
step (one token per sequence). A user's explicit precision always wins; ``auto`` picks bf16 only when it is
measurably faster (:data:`BF16_MIN_SPEEDUP`), since bf16 also changes the numerics.

Command line (the quickstart's ``auto``)::

    python -m hybridrl.utils.cpu_precision --model PATH --decode_rows 96 --threads 2
    # [precision] train  (128 tokens/matmul): fp32 61.3 GFLOP/s, bf16 1.2 GFLOP/s -> fp32
    # [precision] decode (96 rows/matmul):    fp32 40.1 GFLOP/s, bf16 1.1 GFLOP/s -> fp32
    # train=fp32 rollout=float32
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BF16_MIN_SPEEDUP",
    "MatmulShape",
    "PrecisionFigures",
    "choose_precision",
    "measure_precision",
    "model_matmul_shapes",
]

BF16_MIN_SPEEDUP = 1.15  # auto takes bf16 only when it is at least this much faster than fp32
TRAIN_TOKENS = 128  # tokens per matmul in the training probe (a micro-batch holds thousands; kernels saturate earlier)
HEAD_COLUMNS = 4096  # LM-head columns probed (the full vocabulary costs time, not information)
SECONDS_PER_REGIME = 0.25  # measuring budget per regime, both precisions (the last shape may overrun it)


@dataclass(frozen=True)
class MatmulShape:
    """``[m, k] @ [k, n]``."""

    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


@dataclass(frozen=True)
class PrecisionFigures:
    """Measured matmul throughput (GFLOP/s) of one regime in fp32 and bf16."""

    fp32_gflops: float
    bf16_gflops: float

    @property
    def bf16_speedup(self) -> float:
        return self.bf16_gflops / self.fp32_gflops


def model_matmul_shapes(model_config: dict, tokens: int, head_columns: int = HEAD_COLUMNS) -> list[MatmulShape]:
    """The matmuls of one layer and the LM head for ``tokens`` rows, smallest first (a Hugging Face config dict)."""
    hidden = int(model_config["hidden_size"])
    intermediate = int(model_config.get("intermediate_size") or 4 * hidden)
    vocab = int(model_config.get("vocab_size") or head_columns)
    shapes = [
        MatmulShape(tokens, hidden, hidden),
        MatmulShape(tokens, hidden, intermediate),
        MatmulShape(tokens, intermediate, hidden),
        MatmulShape(tokens, hidden, min(vocab, head_columns)),
    ]
    return sorted(shapes, key=lambda shape: shape.flops)


def _seconds(operation, max_calls: int = 5, enough_s: float = 0.03) -> float:
    """The fastest of up to ``max_calls`` timed calls, fewer once ``enough_s`` is spent (an emulated bf16 matmul:
    one call); the minimum drops the calls another process preempted."""
    best, spent = float("inf"), 0.0
    for _ in range(max_calls):
        start = time.perf_counter()
        operation()
        elapsed = time.perf_counter() - start
        best, spent = min(best, elapsed), spent + elapsed
        if spent >= enough_s:
            break
    return best


def measure_precision(
    shapes: list[MatmulShape], budget_s: float = SECONDS_PER_REGIME, decided_ratio: float = 3.0
) -> PrecisionFigures:
    """GFLOP/s of ``torch.mm`` over ``shapes`` (smallest first) in fp32 and in bf16, on torch's threads.

    Each shape is timed in both precisions alternately (load that comes and goes hits both) and its fastest call
    counts. Shapes are added while the budget lasts (at least one), and not after the first shape once one
    precision is ``decided_ratio``× faster: an emulated bf16 matmul takes ~0.1 s, and the answer is already clear.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    flops, fp32_s, bf16_s, start = 0, 0.0, 0.0, time.perf_counter()
    for shape in shapes:
        a, b = torch.randn(shape.m, shape.k, generator=generator), torch.randn(shape.k, shape.n, generator=generator)
        a16, b16 = a.bfloat16(), b.bfloat16()
        torch.mm(a, b)  # first call: kernel selection and page faults (bf16's is timed: it may be all there is)
        fp32_s += _seconds(functools.partial(torch.mm, a, b))
        bf16_s += _seconds(functools.partial(torch.mm, a16, b16))
        flops += shape.flops
        decided = max(fp32_s, bf16_s) >= decided_ratio * min(fp32_s, bf16_s)
        if decided or time.perf_counter() - start >= budget_s:
            break
    return PrecisionFigures(flops / fp32_s / 1e9, flops / bf16_s / 1e9)


def choose_precision(requested: str, figures: PrecisionFigures | None, min_speedup: float = BF16_MIN_SPEEDUP) -> str:
    """``"bf16"`` or ``"fp32"``: the user's explicit choice, else (``auto``) bf16 only if measured ``min_speedup``×
    faster; with no figures (nothing measured) ``auto`` is fp32, the exact and never-emulated choice."""
    if requested in ("bf16", "bfloat16"):
        return "bf16"
    if requested in ("fp32", "float32"):
        return "fp32"
    if requested != "auto":
        raise ValueError(f"precision {requested!r}: expected auto, bf16/bfloat16 or fp32/float32")
    return "bf16" if figures is not None and figures.bf16_speedup >= min_speedup else "fp32"


def _describe(regime: str, figures: PrecisionFigures, choice: str) -> str:
    return (
        f"[precision] {regime}: fp32 {figures.fp32_gflops:.1f} GFLOP/s, bf16 {figures.bf16_gflops:.1f} GFLOP/s "
        f"(bf16 {figures.bf16_speedup:.2f}x) -> {choice}"
    )


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a Hugging Face model folder (its config.json gives the shapes)")
    parser.add_argument("--hidden_size", type=int, help="instead of --model: the model's dimensions")
    parser.add_argument("--intermediate_size", type=int)
    parser.add_argument("--vocab_size", type=int)
    parser.add_argument("--decode_rows", type=int, default=64, help="sequences decoded together (batch x n)")
    parser.add_argument("--train", default="auto", help="the actor's precision: auto, bf16 or fp32")
    parser.add_argument("--rollout", default="auto", help="the rollout's precision: auto, bfloat16 or float32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.model:
        model_config = json.loads((Path(args.model) / "config.json").read_text())
    elif args.hidden_size:
        model_config = {
            "hidden_size": args.hidden_size,
            "intermediate_size": args.intermediate_size,
            "vocab_size": args.vocab_size,
        }
    else:
        parser.error("give --model or --hidden_size")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    choices = {}
    for role, requested, regime, rows in (
        ("train", args.train, f"train ({TRAIN_TOKENS} tokens/matmul)", TRAIN_TOKENS),
        ("rollout", args.rollout, f"decode ({args.decode_rows} rows/matmul)", args.decode_rows),
    ):
        figures = measure_precision(model_matmul_shapes(model_config, rows)) if requested == "auto" else None
        choices[role] = choose_precision(requested, figures)
        if figures is not None:
            print(_describe(regime, figures, choices[role]), flush=True)
    rollout = {"bf16": "bfloat16", "fp32": "float32"}[choices["rollout"]]
    print(f"train={choices['train']} rollout={rollout}", flush=True)
    return {"train": choices["train"], "rollout": rollout}


if __name__ == "__main__":
    main()
