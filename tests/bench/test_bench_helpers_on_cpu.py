"""The benchmark suite's pure helpers: medians, ratios, FLOP/MFU arithmetic, target checks, markdown tables,
the variable-length batch and the step batches the controller benchmark dispatches."""

from __future__ import annotations

import math

import pytest
from figures import (
    headline,
    markdown_table,
    matmul_flops,
    median,
    mfu,
    ratio,
    sample_lengths,
    summarize,
    target_check,
    time_calls,
    training_flops,
)


def test_median_and_summary_drop_the_warmup():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    stats = summarize([100.0, 3.0, 1.0, 2.0], warmup=1)  # the 100 s warm-up is dropped
    assert stats == {"median": 2.0, "min": 1.0, "max": 3.0, "repeats": 3}
    with pytest.raises(ValueError, match="empty"):
        median([])
    with pytest.raises(ValueError, match="nothing to summarize"):
        summarize([1.0], warmup=1)


def test_time_calls_runs_warmup_plus_repeats_and_returns_repeats():
    calls = []
    seconds = time_calls(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and len(seconds) == 3 and all(s >= 0 for s in seconds)
    with pytest.raises(ValueError, match="repeats"):
        time_calls(lambda: None, repeats=0)


def test_ratio_handles_missing_and_zero_peers():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(3.0, None) is None and ratio(3.0, 0.0) is None


def test_flop_and_mfu_arithmetic():
    assert matmul_flops(2, 3, 4) == 48  # 2·m·n·k
    assert training_flops(params=1_000, tokens=10) == 60_000  # 6·N·T
    # 6 · 1e6 params · 1000 tokens = 6e9 FLOPs in 2 s = 3e9 FLOP/s against a 1e10 peak
    assert math.isclose(mfu(1_000_000, 1_000, 2.0, 1e10), 0.3)
    assert math.isclose(mfu(1_000_000, 1_000, 2.0, 1e10, flops_per_param_token=2.0), 0.1)  # forward only
    assert mfu(1, 1, 0.0, 1e10) is None and mfu(1, 1, 1.0, 0.0) is None


def test_target_check_higher_and_lower_is_better():
    assert target_check(3.0, 2.0) == {"target": 2.0, "met": True, "of_target": 1.5}
    assert target_check(1.0, 2.0)["met"] is False
    lower = target_check(0.05, 0.10, higher_is_better=False)  # overhead share: lower is better
    assert lower["met"] is True and math.isclose(lower["of_target"], 2.0)
    assert target_check(None, 2.0) == {"target": 2.0, "met": None, "of_target": None}


def test_headline_checks_the_ratio_or_the_value():
    row = headline("grpo", "samples/s", 6.0, "samples/s", "TRL", 2.0, target=2.0)
    assert row["ratio"] == 3.0 and row["met"] is True and row["target"] == "ratio >= 2"
    share = headline("controller", "overhead", 0.2, "share", target=0.1, target_on="value", higher_is_better=False)
    assert share["ratio"] is None and share["met"] is False and math.isclose(share["of_target"], 0.5)
    assert "target" not in headline("train", "x", 1.0, "tok/s", "peer", 1.0)
    with pytest.raises(ValueError, match="target_on"):
        headline("b", "f", 1.0, "u", target=1.0, target_on="peer")


def test_markdown_table_formats_cells():
    text = markdown_table([{"a": 1.23456, "b": None, "c": True}, {"a": 7, "b": "x|y"}], ["a", "b", "c"], ["A", "B", "C"])
    assert text.splitlines() == ["| A | B | C |", "|---|---|---|", "| 1.23 | – | yes |", "| 7 | x\\|y | – |"]
    with pytest.raises(ValueError, match="headers"):
        markdown_table([], ["a"], ["A", "B"])


def test_sample_lengths_distribution():
    lengths = sample_lengths(1000, max_len=64, min_len=8, full_share=0.25, seed=0)
    assert len(lengths) == 1000 and min(lengths) >= 8 and max(lengths) == 64
    full = sum(length == 64 for length in lengths) / 1000
    assert 0.2 < full < 0.32  # 25% cut at the limit + the uniform part's own share of 64
    assert lengths == sample_lengths(1000, 64, 8, 0.25, seed=0)  # deterministic
    assert sample_lengths(5, 4, 4) == [4] * 5
    with pytest.raises(ValueError, match="min_len"):
        sample_lengths(3, max_len=4, min_len=5)


def test_longtail_lengths_are_mostly_short_with_a_few_at_the_limit():
    lengths = sample_lengths(2000, max_len=256, min_len=32, full_share=0.2, seed=0, dist="longtail")
    assert min(lengths) >= 32 and max(lengths) == 256
    below = [length for length in lengths if length < 256]
    mean_below = sum(below) / len(below)
    assert 32 + 50 < mean_below < 32 + 62  # 32 + exponential of mean 56, capped at 256 (the cap cuts ~2%)
    median_below = sorted(below)[len(below) // 2]
    assert median_below < mean_below  # skewed right: most short
    assert lengths == sample_lengths(2000, 256, 32, 0.2, seed=0, dist="longtail")
    with pytest.raises(ValueError, match="dist"):
        sample_lengths(3, 8, 1, dist="normal")


def test_train_batch_is_left_padded_prompts_and_right_padded_responses():
    from bench_train import build_batch

    data = build_batch(batch=6, prompt_len=8, response_len=5, full_share=0.5, vocab=100, pad_id=0, seed=1)
    mask = data.batch["attention_mask"]
    assert mask.shape == (6, 13) and data.batch["responses"].shape == (6, 5)
    for row in mask.tolist():
        prompt, response = row[:8], row[8:]
        assert prompt == sorted(prompt) and prompt[-1] == 1  # left padding, the prompt ends at the boundary
        assert response == sorted(response, reverse=True) and response[0] == 1  # EOS at different positions
    assert (data.batch["input_ids"][mask == 0] == 0).all()
    assert (data.batch["advantages"][data.batch["response_mask"] == 0] == 0).all()
    assert len({int(n) for n in mask.sum(-1)}) > 1  # variable lengths


def test_train_batch_groups_share_their_prompt():
    import torch
    from bench_train import actor_config, build_batch, parse_args

    data = build_batch(batch=8, prompt_len=8, response_len=5, full_share=0.5, vocab=100, pad_id=0, seed=1,
                       group_size=4)
    prompts = data.batch["input_ids"][:, :8] * data.batch["attention_mask"][:, :8]
    assert all(torch.equal(prompts[row], prompts[row // 4 * 4]) for row in range(8))
    assert not torch.equal(prompts[0], prompts[4])
    config = actor_config(parse_args(["--layouts", "padded_shared"]), "padded_shared", "fixed")
    assert config.share_prompt_prefix and not config.use_remove_padding


def test_train_batch_zero_advantage_groups():
    from bench_train import actor_config, build_batch, parse_args

    data = build_batch(batch=16, prompt_len=8, response_len=5, full_share=0.5, vocab=100, pad_id=0, seed=1,
                       group_size=4, zero_adv_groups=0.5)
    zero_rows = [bool((row == 0).all()) for row in data.batch["advantages"]]
    assert sum(zero_rows) == 8 and all(len(set(zero_rows[g : g + 4])) == 1 for g in range(0, 16, 4))  # whole groups
    args = parse_args(["--layouts", "padded_shared,padded_shared_every_row"])
    assert actor_config(args, "padded_shared", "fixed").skip_zero_advantage_rows
    assert not actor_config(args, "padded_shared_every_row", "fixed").skip_zero_advantage_rows


def test_computed_token_slots_drop_the_columns_the_padded_forward_skips():
    import torch
    from bench_train import micro_batch_tokens
    from omegaconf import OmegaConf

    from hybridrl.protocol import DataProto

    # P = 4, R = 3; column 0 (prompt) and column 6 (response) are padding in both rows: 2 × 5 slots, 8 valid
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0, 0]])
    data = DataProto.from_dict({"attention_mask": mask, "responses": torch.ones(2, 3, dtype=torch.long)})

    def config(packed: bool):
        return OmegaConf.create({"ppo_micro_batch_size_per_gpu": 2, "use_dynamic_bsz": False,
                                 "ppo_max_token_len_per_gpu": 14, "use_remove_padding": packed})

    assert micro_batch_tokens(data, config(packed=False)) == (1, 10)
    assert micro_batch_tokens(data, config(packed=True)) == (1, 8)


def test_controller_step_batches_have_the_trainer_keys_and_sizes():
    from bench_controller import step_batches

    batches = step_batches(rows=8, prompt_len=10, response_len=4)
    gen, full = batches["gen"], batches["full"]
    assert gen.batch["input_ids"].shape == (8, 10) and len(gen.non_tensor_batch["raw_prompt_ids"]) == 8
    assert full.batch["input_ids"].shape == (8, 14) and full.batch["advantages"].shape == (8, 4)
    assert full.non_tensor_batch["prompt"].shape == (8,)  # lists stay one object per row
    chunks = full.chunk(2)
    assert [len(c) for c in chunks] == [4, 4]


def test_controller_step_calls_follow_the_trainer_order():
    from bench_controller import step_batches, step_calls

    batches = step_batches(rows=4, prompt_len=3, response_len=2)
    assert list(step_calls(batches, with_ref=False, with_old_log_prob=False)) == ["generate_sequences", "update_actor"]
    calls = step_calls(batches, with_ref=True, with_old_log_prob=True)
    assert list(calls) == ["generate_sequences", "compute_log_prob", "compute_ref_log_prob", "update_actor"]
    assert calls["generate_sequences"] is batches["gen"] and calls["update_actor"] is batches["full"]


def test_grpo_helpers_drop_warmup_and_find_minutes_to_target():
    from bench_grpo_vs_trl import drop_warmup, minutes_to_target

    assert drop_warmup({1: 30.0, 2: 10.0, 3: 12.0}) == [10.0, 12.0]
    assert drop_warmup({1: 30.0}) == [30.0]
    val = {0: 0.1, 5: 0.5, 10: 0.8}
    steps = {s: 6.0 for s in range(1, 11)}
    assert minutes_to_target(val, steps, 0.7) == 1.0  # 10 steps of 6 s
    assert minutes_to_target(val, steps, 0.9) is None


def test_rollout_headlines_pair_hf_with_its_peers():
    from run_all import rollout_headlines

    records = [
        {"model": "tiny", "dtype": "float32", "scenario": "eos", "engine": "hf", "useful_tokens_per_s": 300.0},
        {"model": "tiny", "dtype": "float32", "scenario": "eos", "engine": "hf_generate", "useful_tokens_per_s": 100.0},
        {"model": "tiny", "dtype": "float32", "scenario": "full", "engine": "hf", "useful_tokens_per_s": 200.0},
        {"model": "tiny", "dtype": "float32", "scenario": "full", "engine": "vllm", "useful_tokens_per_s": 400.0},
        {"model": "tiny", "engine": "vllm", "skipped": "vllm not importable"},
    ]
    rows = {row["figure"] + " vs " + row["peer"]: row for row in rollout_headlines(records)}
    eos = rows["tiny float32 eos: hf rollout useful tokens/s vs hf_generate"]
    assert eos["ratio"] == 3.0 and eos["met"] is True
    full = rows["tiny float32 full: hf rollout useful tokens/s vs vllm"]
    assert full["ratio"] == 0.5 and "met" not in full  # no target against vllm
    assert len(rows) == 2


def test_grpo_vs_trl_pairs_equal_precisions_and_tags_each_shape():
    from bench_grpo_vs_trl import headlines, parse_args, trl_command
    from hybridrl_runs import GRPOShape

    args = parse_args(["--response-lens", "16,128"])
    assert args.precisions == "fp32,bf16" and args.response_lens == "16,128"
    shape = GRPOShape(prompts=4, n=8, response_length=128, lr=5e-6, weight_decay=0.0, micro=32, seed=1,
                      recompute_old_log_prob=False)
    bf16 = trl_command("/m", shape, args, "/tmp/x.jsonl", "bf16")
    fp32 = trl_command("/m", shape, args, "/tmp/x.jsonl", "fp32")
    assert bf16[0] == args.trl_python and bf16[-1] == "--bf16" and "--bf16" not in fp32
    assert bf16[bf16.index("--response_length") + 1] == "128"
    side = {"samples_per_s": 4.0, "step_s": {"median": 8.0}}
    peer = {"samples_per_s": 2.0, "step_s": {"median": 16.0}}
    rows = headlines([{"model": "smollm2", "response_length": 128, "precision": "bf16", "hybridrl": side, "trl": peer}])
    assert rows[0]["figure"] == "smollm2 R=128 bf16/bf16: GRPO samples/s" and rows[0]["ratio"] == 2.0


def test_grpo_vs_trl_runs_trl_with_the_system_allocator_unless_asked():
    from bench_grpo_vs_trl import parse_args, trl_allocator_env

    from hybridrl.utils.cpu_allocator import GLIBC_TUNED

    assert parse_args([]).trl_allocator == "system"  # TRL as its users run it
    assert trl_allocator_env("system") == {}
    assert trl_allocator_env("glibc") == {"GLIBC_TUNABLES": GLIBC_TUNED}


def test_allocator_benchmark_children_get_exactly_the_workers_allocator_env():
    from bench_allocator import allocator_env, headlines

    from hybridrl.utils.cpu_allocator import GLIBC_TUNED

    mine = {"PATH": "/bin", "LD_PRELOAD": "/x/libtcmalloc.so.4", "GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
    assert allocator_env("system", mine) == {"PATH": "/bin"}  # the caller's allocator settings never leak in
    assert allocator_env("glibc", mine) == {"PATH": "/bin", "GLIBC_TUNABLES": GLIBC_TUNED}
    records = [
        {"setting": "system", "dtype": "bf16", "update_s": {"median": 8.0}, "minor_faults": 400, "sys_s": 17.0},
        {"setting": "tcmalloc", "dtype": "bf16", "update_s": {"median": 4.0}, "minor_faults": 100, "sys_s": 3.5},
        {"setting": "jemalloc", "dtype": "bf16", "skipped": "jemalloc is not installed"},
    ]
    (row,) = headlines(records)
    assert row["figure"] == "bf16 update, tcmalloc" and row["value"] == 4.0 and row["peer_value"] == 8.0
    assert "minor faults 100 vs 400" in row["note"]


def test_rollout_variants_are_decode_options_that_turn_one_thing_off():
    from bench_rollout import VARIANTS

    from hybridrl.workers.rollout.decoding import DecodeOptions

    default = DecodeOptions()
    before = DecodeOptions(**VARIANTS["hf_before"])
    assert (before.kv_cache, before.draw, before.packed_head) == ("dynamic", "multinomial", False)
    for name in ("hf_multinomial", "hf_plain_head"):
        changed = {field for field, value in vars(DecodeOptions(**VARIANTS[name])).items() if value != vars(default)[field]}
        assert len(changed) == 1, name


def test_grpo_vs_trl_hybridrl_settings_skip_zero_advantage_rows_unless_asked():
    from bench_grpo_vs_trl import hybridrl_settings, parse_args

    key = "actor_rollout_ref.actor.skip_zero_advantage_rows"
    fp32 = hybridrl_settings(parse_args([]), "fp32")
    assert key not in fp32 and "actor_rollout_ref.rollout.dtype" not in fp32  # the config's default (skip) applies
    every_row = hybridrl_settings(parse_args(["--no-skip-zero-advantage-rows"]), "bf16", {"x.y": 1})
    assert every_row[key] is False and every_row["x.y"] == 1
    assert every_row["actor_rollout_ref.rollout.dtype"] == "bfloat16"
    assert every_row["+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"] == "bf16"


def test_decode_matmuls_shapes_totals_and_a_small_run():
    import bench_decode_matmuls as dm

    shapes = dm.layer_projections(hidden=576, intermediate=1536, heads=9, kv_heads=3)  # SmolLM2-135M
    assert shapes["k_proj"] == (192, 576) and shapes["qkv_fused"] == (960, 576)
    assert shapes["gate_up_fused"] == (3072, 576) and shapes["down_proj"] == (576, 1536)
    result = dm.main(["--hidden", "32", "--intermediate", "64", "--heads", "4", "--kv-heads", "2",
                      "--rows", "2,4", "--repeats", "2", "--threads", "1"])
    assert len(result["records"]) == 2 * len(shapes)
    assert all(r["linear_s"] > 0 and r["packed_s"] > 0 for r in result["records"])
    totals = {t["rows"]: t for t in result["layer_totals"]}
    at2 = {r["name"]: r for r in result["records"] if r["rows"] == 2}
    separate = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert totals[2]["linear_s"] == pytest.approx(sum(at2[n]["linear_s"] for n in separate))
    assert totals[2]["fused_linear_s"] == pytest.approx(
        sum(at2[n]["linear_s"] for n in ("qkv_fused", "o_proj", "gate_up_fused", "down_proj")))


def test_busy_neighbour_reads_the_step_times_of_a_metrics_file(tmp_path):
    import json

    from bench_busy_neighbour import _step_times

    rows = [
        {"step": 0, "data": {"val-core/arithmetic/reward/mean@1": 0.1}},  # validation before training: no step time
        {"step": 1, "data": {"timing_s/step": 12.5, "actor/pg_loss": 0.1}},
        {"step": 2, "data": {"timing_s/step": 8.25}},
    ]
    metrics = tmp_path / "run.jsonl"
    metrics.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert _step_times(metrics) == [12.5, 8.25]
