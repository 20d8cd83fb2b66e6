"""bench_attention.py: the three attention layouts of a micro-batch, run for real on tiny shapes."""

from __future__ import annotations

import torch


def test_micro_batch_inputs_pad_trimmed_columns_and_pack_valid_tokens():
    from bench_attention import micro_batch_inputs
    from bench_train import build_batch

    data = build_batch(batch=4, prompt_len=8, response_len=4, full_share=0.0, vocab=50, pad_id=0, seed=0)
    mask = data.batch["attention_mask"]
    padded = micro_batch_inputs(data.batch, "padded")
    packed = micro_batch_inputs(data.batch, "packed")
    assert padded["attention_mask"].sum() == mask.sum()  # only all-padding columns are dropped
    assert packed["attention_mask"] is None and packed["position_ids"].shape == (1, int(mask.sum()))
    assert packed["cu_seqlens"].tolist() == [0, *torch.cumsum(mask.sum(-1), 0).tolist()]


def test_bench_runs_every_variant_and_reports_ratios():
    from bench_attention import VARIANTS, main

    result = main(["--batch", "4", "--prompt-len", "8", "--response-len", "4", "--micro", "2", "--heads", "2",
                   "--kv-heads", "1", "--head-dim", "8", "--layers", "1", "--dtypes", "fp32", "--repeats", "1",
                   "--warmup", "0"])
    assert set(result["results"]["fp32"]) == set(VARIANTS)
    assert all(stats["median"] > 0 for stats in result["results"]["fp32"].values())
    assert [row["figure"] for row in result["headlines"]] == [
        "attention fwd+bwd fp32: packed_dense vs padded", "attention fwd+bwd fp32: packed_varlen vs padded"]
