"""Training tokens/s of hybridrl's FSDP2 actor on a variable-length PPO batch, and its MFU.

One process, a gloo group of world size 1, the actor exactly as the worker builds it
(``build_fsdp_module`` → FSDP2, ``build_optimizer`` → AdamW, ``DataParallelPPOActor``). Variants:

    layout   padded (``use_remove_padding=False``) | packed (``True``; varlen attention ``hybridrl_varlen``) |
             packed_dense (opt-in: the packed row under ``sdpa``'s dense nnz × nnz mask, the path before varlen) |
             padded_shared (opt-in: ``model.share_prompt_prefix=True``, each distinct prompt run once; with
             ``--group-size n`` the rows come in GRPO groups of n samples sharing a prompt, with
             ``--common-prefix K`` every prompt begins with the same K tokens, run once in a prefix pass) |
             padded_shared_whole (opt-in: padded_shared without the prefix pass: each distinct prompt runs whole) |
             padded_shared_every_row (opt-in: padded_shared with ``actor.skip_zero_advantage_rows=False``: the rows
             whose advantages are all 0, ``--zero-adv-groups`` of the groups, run too; every other layout skips them)
    bsz      fixed (``ppo_micro_batch_size_per_gpu``) | dynamic (``use_dynamic_bsz`` + ``ppo_max_token_len_per_gpu``)
    dtype    fp32 | bf16 (``fsdp_config.mixed_precision.param_dtype=bf16``: hybridrl's way on CPU, fp32
             master weights) | bf16_autocast (fp32 FSDP under ``torch.autocast("cpu", bf16)``, opt-in)

The batch: ``--batch`` rows of left-padded prompts (lengths uniform in [P/4, P]) and right-padded
responses ending at different EOS positions (``--full-share`` of them run to the limit R, the rest
uniform in [R/8, R], or with ``--response-dist longtail`` R/8 plus an exponential of mean 7R/32: most short, a few
long). One timed call = one ``update_policy`` (one optimizer step over the whole batch)
or one ``compute_log_prob``; medians over ``--repeats`` after ``--warmup`` dropped calls.

tokens/s counts *valid* tokens (attention mask); MFU = 6 × params × valid tokens / time / peak, with the
peak the best torch.mm FLOP/s of the same dtype measured at the start of the run. ``params`` counts the
embedding tables too (``embedding_params`` is recorded): with a large vocabulary, whose LM head runs on the
response positions only (``logits_to_keep``), 6 × params overstates the work and so the MFU.

    python scripts/bench/bench_train.py --models tiny,100m --repeats 3 --out train.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import (  # noqa: E402
    LENGTH_DISTRIBUTIONS,
    emit_json,
    headline,
    log,
    matmul_flops,
    mfu,
    sample_lengths,
    summarize,
    time_calls,
)

DTYPES = ("fp32", "bf16", "bf16_autocast")
LAYOUTS = ("padded", "packed", "packed_dense", "padded_shared", "padded_shared_whole", "padded_shared_every_row")
_BF16_MIXED_PRECISION = {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


# ----------------------------------------------------------------------------- matmul peak


def matmul_peak(sizes: list[int], repeats: int) -> dict[str, Any]:
    """Best ``torch.mm`` FLOP/s per dtype over square sizes: ``{"fp32": {...}, "bf16": {...}}``."""
    import torch

    result: dict[str, Any] = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        per_size = {}
        for size in sizes:
            a = torch.randn(size, size, dtype=dtype)
            b = torch.randn(size, size, dtype=dtype)
            seconds = summarize(time_calls(functools.partial(torch.mm, a, b), repeats, warmup=2))["median"]
            per_size[str(size)] = matmul_flops(size, size, size) / seconds
        result[name] = {"peak_flops_per_s": max(per_size.values()), "flops_per_s_by_size": per_size}
    return result


# ----------------------------------------------------------------------------- batch


def build_batch(batch: int, prompt_len: int, response_len: int, full_share: float, vocab: int, pad_id: int,
                seed: int, group_size: int = 1, response_dist: str = "uniform", common_prefix: int = 0,
                zero_adv_groups: float = 0.0) -> Any:
    """A PPO batch with variable lengths (see the module docstring); rows ``g·n … g·n+n-1`` share one prompt
    when ``group_size`` n > 1 (GRPO's samples of a prompt); every prompt's first ``common_prefix`` tokens are
    the same (a chat template's opening; prompts shorter than that are lengthened to it plus one token); a
    random ``zero_adv_groups`` share of the groups get advantage 0 on every row (GRPO groups whose samples all
    earned the same reward).

    Returns:
        DataProto with ``input_ids, attention_mask, position_ids [B, P+R]``, ``responses, response_mask,
        advantages, old_log_probs [B, R]`` and ``meta_info["temperature"] = 1.0``.
    """
    import torch

    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask

    prompt_lens = sample_lengths(batch, prompt_len, max(1, prompt_len // 4), 0.0, seed)
    response_lens = sample_lengths(batch, response_len, max(1, response_len // 8), full_share, seed + 1, response_dist)
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, prompt_len + response_len), generator=gen)
    if group_size > 1:  # each row takes its group's first row's prompt
        first = torch.arange(batch) // group_size * group_size
        input_ids[:, :prompt_len] = input_ids[first, :prompt_len]
        prompt_lens = [prompt_lens[int(row)] for row in first]
    if common_prefix:
        prompt_lens = [min(prompt_len, max(p_len, common_prefix + 1)) for p_len in prompt_lens]
        opening = torch.randint(5, vocab, (common_prefix,), generator=gen)
        for row, p_len in enumerate(prompt_lens):
            input_ids[row, prompt_len - p_len : prompt_len - p_len + common_prefix] = opening
    attention_mask = torch.zeros_like(input_ids)
    for row, (p_len, r_len) in enumerate(zip(prompt_lens, response_lens)):
        attention_mask[row, prompt_len - p_len : prompt_len + r_len] = 1
    input_ids = torch.where(attention_mask.bool(), input_ids, torch.full_like(input_ids, pad_id))
    response_mask = attention_mask[:, prompt_len:]
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "responses": input_ids[:, prompt_len:],
        "response_mask": response_mask,
        "advantages": torch.randn(batch, response_len, generator=gen) * response_mask,
        "old_log_probs": torch.zeros(batch, response_len),
    }
    groups = batch // max(1, group_size)
    zeroed = torch.randperm(groups, generator=gen)[: round(zero_adv_groups * groups)]
    for group in zeroed.tolist():
        tensors["advantages"][group * group_size : (group + 1) * group_size] = 0.0
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


# ----------------------------------------------------------------------------- actor


def actor_config(args: argparse.Namespace, layout: str, bsz: str) -> Any:
    """``actor_rollout_ref.actor`` keys, per rank: one mini-batch (= one optimizer step) per call."""
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "ppo_mini_batch_size": args.batch, "ppo_micro_batch_size_per_gpu": args.micro,
        "use_dynamic_bsz": bsz == "dynamic", "ppo_max_token_len_per_gpu": token_budget(args), "ppo_epochs": 1,
        "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
        "policy_loss": {"loss_mode": "vanilla"}, "loss_agg_mode": "token-mean", "entropy_coeff": 0,
        "use_kl_loss": False, "grad_clip": 1.0, "use_remove_padding": layout.startswith("packed"),
        "share_prompt_prefix": layout.startswith("padded_shared"),
        "skip_zero_advantage_rows": layout != "padded_shared_every_row",
    })


def token_budget(args: argparse.Namespace) -> int:
    """``ppo_max_token_len_per_gpu``: ``--max-token-len`` or the padded size of one fixed micro-batch."""
    return args.max_token_len or args.micro * (args.prompt_len + args.response_len)


def build_engine(model_dir: str, dtype: str, grad_ckpt: bool) -> tuple[Any, Any, dict[str, int]]:
    """FSDP2-wrapped causal LM + AdamW, as ``ActorRolloutRefWorker._build_actor`` builds them.

    Returns:
        ``(module, optimizer, {"params": all parameters, "embedding_params": of the embedding tables})``.
    """
    import torch
    from omegaconf import OmegaConf

    from hybridrl.config.entry import compose_config
    from hybridrl.utils.distributed import init_worker_distributed
    from hybridrl.workers import engine

    init_worker_distributed("cpu")
    fsdp_config = {"mixed_precision": _BF16_MIXED_PRECISION} if dtype == "bf16" else {}
    shipped = compose_config(overrides=[f"actor_rollout_ref.model.path={model_dir}",  # the worker's model + optim
                                        f"actor_rollout_ref.model.enable_gradient_checkpointing={grad_ckpt}",
                                        "actor_rollout_ref.actor.optim.lr=1e-6"]).actor_rollout_ref
    spec = engine.ModelSpec(shipped.model, OmegaConf.create(fsdp_config), "fsdp2", "causal_lm", trainable=True)
    module, _ = engine.build_fsdp_module(spec, "cpu")
    optimizer = engine.build_optimizer(module, shipped.actor.optim)
    counts = {
        "params": sum(p.numel() for p in module.parameters()),
        "embedding_params": sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Embedding)),
    }
    return module, optimizer, counts


def dtype_context(dtype: str) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast("cpu", bf16)`` for ``bf16_autocast``; nothing for fp32/bf16 (FSDP sets those)."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16_autocast" else contextlib.nullcontext()


def micro_batch_tokens(data: Any, config: Any) -> tuple[int, int]:
    """``(micro-batches, token slots the forward computes)`` of one mini-batch: packed rows count their valid
    tokens, padded rows their width less the columns that are padding in the whole micro-batch (which the
    padded forward skips). Valid tokens / padded slots bounds what packing can gain on per-token work."""
    from hybridrl.workers.actor.forward import skipped_columns, split_micro_batches

    micro_batches, _ = split_micro_batches(
        data.batch, config.ppo_micro_batch_size_per_gpu, config.use_dynamic_bsz, config.ppo_max_token_len_per_gpu
    )
    if config.use_remove_padding:
        return len(micro_batches), sum(int(mb["attention_mask"].sum()) for mb in micro_batches)
    slots = 0
    for mb in micro_batches:
        mask = mb["attention_mask"]
        lead, trail = skipped_columns(mask, mb["responses"].shape[-1])
        slots += mask.shape[0] * (mask.shape[1] - lead - trail)
    return len(micro_batches), slots


# ----------------------------------------------------------------------------- one model


@contextlib.contextmanager
def attention_context(module: Any, layout: str) -> Any:
    """``packed_dense``: the module runs transformers' ``sdpa`` (dense block-diagonal mask) during the call;
    other layouts keep the attention it was loaded with (``hybridrl_varlen``)."""
    loaded = module.config._attn_implementation
    module.set_attn_implementation("sdpa" if layout == "packed_dense" else loaded)  # a no-op for the others
    try:
        yield
    finally:
        module.set_attn_implementation(loaded)


@contextlib.contextmanager
def prefix_pass_context(layout: str) -> Any:
    """``padded_shared_whole``: no common-prefix pass during the call (each distinct prompt runs whole)."""
    from hybridrl.workers.actor import shared_prefix

    threshold = shared_prefix.MIN_SAVED_POSITIONS
    if layout == "padded_shared_whole":
        shared_prefix.MIN_SAVED_POSITIONS = 1 << 62
    try:
        yield
    finally:
        shared_prefix.MIN_SAVED_POSITIONS = threshold


def make_call(actor: Any, data: Any, config: Any, phase: str, dtype: str, layout: str = "padded") -> Any:
    """A no-argument callable running one ``phase`` call (update or log-prob) of ``actor`` on ``data``."""
    meta = {
        "temperature": 1.0,
        "micro_batch_size": config.ppo_micro_batch_size_per_gpu,
        "use_dynamic_bsz": config.use_dynamic_bsz,
        "max_token_len": config.ppo_max_token_len_per_gpu,
    }

    def call() -> None:
        data.meta_info.update(meta)
        with dtype_context(dtype), attention_context(actor.actor_module, layout), prefix_pass_context(layout):
            if phase == "update":
                actor.update_policy(data)
            else:
                actor.compute_log_prob(data, calculate_entropy=True)

    return call


def round_robin(calls: dict[Any, Any], repeats: int, warmup: int) -> dict[Any, tuple[list[float], list[float]]]:
    """``(wall seconds, process CPU seconds)`` per call name; repeats interleave the variants (A B C A B C ...)
    so that a load change on a shared machine hits every variant alike; the CPU time of a 1-thread run hardly
    depends on the load. Each variant's warm-up calls run first and are dropped."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    seconds: dict[Any, tuple[list[float], list[float]]] = {name: ([], []) for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            cpu_start = time.process_time()
            seconds[name][0].extend(time_calls(call, repeats=1, warmup=0))
            seconds[name][1].append(time.process_time() - cpu_start)
    return seconds


def make_record(base: dict, samples: tuple[list[float], list[float]], shape: tuple[int, int], valid_tokens: int,
                peak: float) -> dict:
    """One variant's record: timing summaries (wall, CPU), valid tokens/s (wall, CPU) and MFU (6 FLOPs per param
    and token for the update, 2 for log-probs)."""
    stats, cpu = summarize(samples[0]), summarize(samples[1])
    flops_per_token = 6.0 if base["phase"] == "update" else 2.0
    record = {
        **base, "micro_batches": shape[0], "valid_tokens": valid_tokens, "computed_tokens": shape[1],
        "seconds": stats, "tokens_per_s": valid_tokens / stats["median"],
        "cpu_seconds": cpu, "tokens_per_cpu_s": valid_tokens / cpu["median"],
        "mfu": mfu(base["params"], valid_tokens, stats["median"], peak, flops_per_token),
    }
    log(f"{base['model']} {base['dtype']} {base['layout']} {base['bsz']} {base['phase']}: median "
        f"{stats['median']:.3f} s (min {stats['min']:.3f}; CPU {cpu['median']:.3f} s), {record['tokens_per_s']:.0f} "
        f"tok/s, MFU {record['mfu']:.3%}")
    return record


def bench_model(name: str, model_dir: str, args: argparse.Namespace, peaks: dict[str, Any]) -> list[dict]:
    """Every (dtype, layout, bsz, phase) variant of one model; one record each."""
    import torch

    from hybridrl.workers import engine as engine_lib
    from hybridrl.workers.actor import DataParallelPPOActor

    tokenizer = engine_lib.build_tokenizer(model_dir)
    vocab = engine_lib.load_hf_config(model_dir).vocab_size
    data = build_batch(args.batch, args.prompt_len, args.response_len, args.full_share, vocab,
                       tokenizer.pad_token_id or 0, args.seed, args.group_size, args.response_dist, args.common_prefix,
                       args.zero_adv_groups)
    valid_tokens = int(data.batch["attention_mask"].sum())
    records = []
    for dtype in args.dtypes:
        torch.manual_seed(args.seed)
        module, optimizer, counts = build_engine(model_dir, dtype, args.grad_ckpt)
        reference = DataParallelPPOActor(actor_config(args, "padded", "fixed"), module)
        data.meta_info.update(micro_batch_size=args.micro, use_dynamic_bsz=False)
        with dtype_context(dtype):  # on-policy start: old log-probs of the current weights
            data.batch["old_log_probs"] = reference.compute_log_prob(data)[0].float()
        calls, shapes = {}, {}
        for layout in args.layouts:
            for bsz in args.bsz:
                config = actor_config(args, layout, bsz)
                actor = DataParallelPPOActor(config, module, optimizer)
                for phase in args.phases:
                    calls[(layout, bsz, phase)] = make_call(actor, data, config, phase, dtype, layout)
                    shapes[(layout, bsz, phase)] = micro_batch_tokens(data, config)
        seconds = round_robin(calls, args.repeats, args.warmup)
        peak = peaks["bf16" if dtype.startswith("bf16") else "fp32"]["peak_flops_per_s"]
        for (layout, bsz, phase), samples in seconds.items():
            base = {"model": name, **counts, "dtype": dtype, "layout": layout, "bsz": bsz, "phase": phase}
            records.append(make_record(base, samples, shapes[(layout, bsz, phase)], valid_tokens, peak))
        del module, optimizer, calls
    return records


# ----------------------------------------------------------------------------- comparisons


def find(records: list[dict], **keys: Any) -> dict | None:
    """The record matching every ``keys`` item, or None."""
    for record in records:
        if all(record.get(k) == v for k, v in keys.items()):
            return record
    return None


def comparisons(records: list[dict]) -> list[dict]:
    """Headline rows per model (the full grid stays in ``records``): packed vs padded per dtype and phase
    (fixed micro-batches; the issue's 1.5× target on the update), dynamic vs fixed bsz and bf16 vs fp32 on
    the update, and the update's MFU in fp32 (padded, fixed)."""
    rows = []
    for record in records:
        model, dtype, layout, bsz, phase = (record[k] for k in ("model", "dtype", "layout", "bsz", "phase"))
        base = {"model": model, "dtype": dtype, "layout": layout, "bsz": bsz, "phase": phase}
        if layout == "padded_shared" and bsz == "fixed":
            peer = find(records, **{**base, "layout": "padded"})
            rows.append(_row(f"{model} {phase} {dtype}: shared prompt vs padded", record, peer, "padded"))
            peer = find(records, **{**base, "layout": "padded_shared_whole"})
            rows.append(_row(f"{model} {phase} {dtype}: shared prompt with vs without the prefix pass", record, peer,
                             "no prefix pass"))
            peer = find(records, **{**base, "layout": "padded_shared_every_row"})
            rows.append(_row(f"{model} {phase} {dtype}: zero-advantage rows skipped vs run", record, peer,
                             "every row run"))
        if layout.startswith("packed") and bsz == "fixed":
            peer = find(records, **{**base, "layout": "padded"})
            row = _row(f"{model} {phase} {dtype}: {layout} vs padded", record, peer, "padded",
                       1.5 if phase == "update" and layout == "packed" else None)
            if row is not None:  # packing can gain at most the padded slots per valid token on per-token work
                row["note"] += (f"; padded computes {peer['computed_tokens']} token slots for "
                                f"{record['computed_tokens']} valid: at most "
                                f"{peer['computed_tokens'] / record['computed_tokens']:.2f}× on per-token work")
            rows.append(row)
        if phase != "update":
            continue
        if bsz == "dynamic" and dtype == "fp32":
            peer = find(records, **{**base, "bsz": "fixed"})
            rows.append(_row(f"{model} update fp32 {layout}: dynamic vs fixed bsz", record, peer, "fixed bsz"))
        if dtype != "fp32" and layout == "padded" and bsz == "fixed":
            peer = find(records, **{**base, "dtype": "fp32"})
            rows.append(_row(f"{model} update padded: {dtype} vs fp32", record, peer, "fp32"))
        if dtype == "fp32" and layout == "padded" and bsz == "fixed" and record["mfu"] is not None:
            rows.append(headline("train", f"{model} update fp32 padded: MFU", record["mfu"],
                                 "of the fp32 torch.mm peak", note=f"{record['params'] / 1e6:.1f}M params, "
                                 f"{record['tokens_per_s']:.0f} valid tokens/s"))
    return [row for row in rows if row is not None]


def _row(figure: str, record: dict, peer: dict | None, peer_name: str, target: float | None = None) -> dict | None:
    if peer is None:
        return None
    return headline("train", figure, record["tokens_per_s"], "valid tokens/s", peer_name, peer["tokens_per_s"],
                    target=target, note=f"MFU {record['mfu']:.2%} vs {peer['mfu']:.2%}; CPU-time ratio "
                    f"{record['tokens_per_cpu_s'] / peer['tokens_per_cpu_s']:.2f}×")


# ----------------------------------------------------------------------------- main


def resolve_model(name: str, root: str, smollm2_dir: str | None) -> str:
    """A model folder: bench_rollout's random Qwen2 models (tiny/small/100m) or the prepared SmolLM2."""
    if name == "smollm2":
        path = smollm2_dir or os.path.expanduser("~/.cache/hybridrl/smollm2-135m-instruct")
        if not os.path.isdir(path):
            raise FileNotFoundError(
                f"{path} does not exist: run `python examples/quickstart/prepare_model.py --cache_dir ...` "
                "or pass --smollm2-dir."
            )
        return path
    from bench_rollout import build_model  # the rollout benchmark's random Qwen2 models

    return build_model(name, root)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,100m", help="tiny, small, 100m (random Qwen2) or smollm2")
    parser.add_argument("--smollm2-dir", default=None)
    parser.add_argument("--batch", type=int, default=32, help="rows per batch (= one optimizer step)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--response-len", type=int, default=64)
    parser.add_argument("--full-share", type=float, default=0.2, help="share of responses cut at the limit")
    parser.add_argument("--response-dist", default="uniform", choices=LENGTH_DISTRIBUTIONS,
                        help="response lengths below the limit: uniform in [R/8, R], or longtail (R/8 + an "
                             "exponential of mean 7R/32: most short, a few long)")
    parser.add_argument("--micro", type=int, default=8, help="ppo_micro_batch_size_per_gpu")
    parser.add_argument("--common-prefix", type=int, default=0,
                        help="every prompt begins with the same this many tokens (a chat template's opening)")
    parser.add_argument("--group-size", type=int, default=1,
                        help="rows per shared prompt (GRPO's n; 1: every row its own prompt)")
    parser.add_argument("--zero-adv-groups", type=float, default=0.0,
                        help="share of the groups whose advantages are all 0 (skipped by the update unless the "
                             "layout is padded_shared_every_row)")
    parser.add_argument("--max-token-len", type=int, default=0,
                        help="ppo_max_token_len_per_gpu (0: micro × (prompt + response))")
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"subset of {','.join(DTYPES)}")
    parser.add_argument("--layouts", default="padded,packed")
    parser.add_argument("--bsz", default="fixed,dynamic")
    parser.add_argument("--phases", default="update,log_prob", help="update and/or log_prob")
    parser.add_argument("--grad-ckpt", action="store_true", help="enable_gradient_checkpointing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--matmul-sizes", default="256,1024,2048")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    for key, allowed in (("dtypes", DTYPES), ("layouts", LAYOUTS), ("bsz", ("fixed", "dynamic")),
                         ("phases", ("update", "log_prob"))):
        values = [v for v in getattr(args, key).split(",") if v]
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            parser.error(f"--{key}: unknown {unknown}; choose from {list(allowed)}")
        setattr(args, key, values)
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    peaks = matmul_peak([int(s) for s in args.matmul_sizes.split(",")], max(args.repeats, 3))
    log(f"matmul peak: fp32 {peaks['fp32']['peak_flops_per_s'] / 1e9:.1f} GFLOP/s, "
        f"bf16 {peaks['bf16']['peak_flops_per_s'] / 1e9:.1f} GFLOP/s")
    records: list[dict] = []
    with tempfile.TemporaryDirectory() as root:
        for name in args.models.split(","):
            records += bench_model(name, resolve_model(name, root, args.smollm2_dir), args, peaks)
    result = {
        "benchmark": "train",
        "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"token_budget": token_budget(args)},
        "torch_threads": torch.get_num_threads(),
        "matmul_peak": peaks,
        "records": records,
        "headline": comparisons(records),
    }
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
