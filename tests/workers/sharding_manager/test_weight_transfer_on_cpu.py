"""Cross-pool weight transfer without Ray: packing, bucketing, checksums, unpacking into a real hf engine.

The object store is a dict here (``put`` / ``get`` of ``weight_transfer``); the Ray path is
``test_weight_transfer_ray_on_cpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from transfer_testlib import DictStore, perturbed_model, standalone_engine

from hybridrl.workers.sharding_manager.weight_sync import (
    WeightSyncError,
    fusion_group,
    iter_buckets,
    iter_full_state_dict,
)
from hybridrl.workers.sharding_manager.weight_transfer import (
    WeightPackage,
    first_package,
    pack_bucket,
    publish_state_dict,
    receive_package,
    unpack_bucket,
)

_KB = 1024


def _named(*sizes_and_dtypes):
    """Tensors ``t0, t1, ...`` with values 0.5·i + arange (distinct, exact in bf16 for small sizes)."""
    return [
        (f"t{i}", (torch.arange(numel, dtype=torch.float32) + 0.5 * i).to(dtype))
        for i, (numel, dtype) in enumerate(sizes_and_dtypes)
    ]


# ---------------------------------------------------------------------------- buckets


def test_bucket_layout_is_aligned_and_round_trips():
    # fp32 [256] = 1024 B, bf16 [100] = 200 B → padded to 256 B (4 × 64), int64 [3] = 24 B → 64 B
    named = [("a", torch.randn(16, 16)), ("b", torch.randn(100).to(torch.bfloat16)), ("c", torch.tensor([1, -2, 3]))]
    bucket = pack_bucket(named)
    assert [(e.offset, e.nbytes) for e in bucket.entries] == [(0, 1024), (1024, 200), (1280, 24)]
    assert bucket.data.nbytes == 1024 + 256 + 64
    out = dict(unpack_bucket(bucket))
    for name, tensor in named:
        assert out[name].dtype == tensor.dtype and out[name].shape == tensor.shape
        assert torch.equal(out[name], tensor)


def test_buckets_split_by_raw_bytes_and_a_large_tensor_gets_its_own():
    # fp32 sizes 1024, 1024, 2400, 40 B with a 2048 B limit: [a, b] (1024 + 1024 = 2048 fits exactly),
    # [c] (2400 > 2048 alone), [d] (2400 + 40 > 2048)
    named = _named((256, torch.float32), (256, torch.float32), (600, torch.float32), (10, torch.float32))
    buckets = list(iter_buckets(named, bucket_bytes=2048))
    assert [[name for name, _ in bucket] for bucket in buckets] == [["t0", "t1"], ["t2"], ["t3"]]
    # padded buffers: 1024 + 1024; 2400 → 38 × 64 = 2432; 40 → 64
    assert [pack_bucket(bucket).data.nbytes for bucket in buckets] == [2048, 2432, 64]


def test_buckets_never_split_a_decoder_layer():
    # vLLM fuses q/k/v and gate/up of one layer; a layer split over two reload calls loses its first part.
    # fp32 sizes: embed 400 B, layer 0: 4 × 160 B = 640 B, layer 1: 2 × 160 B, norm 40 B; limit 512 B.
    names = ["model.embed_tokens.weight"] + [f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkvo"]
    names += [f"model.layers.1.mlp.{p}_proj.weight" for p in ("gate", "up")] + ["model.norm.weight"]
    sizes = [100, 40, 40, 40, 40, 40, 40, 10]
    named = [(name, torch.zeros(numel)) for name, numel in zip(names, sizes)]
    buckets = [[name for name, _ in bucket] for bucket in iter_buckets(named, bucket_bytes=512)]
    # embed (400) alone: + layer 0 (640) > 512; layer 0 alone (over the limit, never split);
    # layer 1 (320) + norm (40) = 360 ≤ 512
    assert buckets == [names[:1], names[1:5], names[5:]]
    assert fusion_group("model.layers.12.mlp.experts.3.w1.weight") == "model.layers.12"
    assert fusion_group("lm_head.weight") == "lm_head.weight"


def test_a_damaged_bucket_names_the_tensor():
    bucket = pack_bucket(_named((256, torch.float32), (600, torch.float32)))
    bucket.data[1024 + 100] ^= 0x01  # one bit of t1 (t1 starts at byte 1024)
    with pytest.raises(WeightSyncError, match=r"tensor 't1' \(float32 \[600\]\) arrived damaged"):
        unpack_bucket(bucket)


def test_a_truncated_bucket_is_caught():
    bucket = pack_bucket(_named((256, torch.float32), (600, torch.float32)))
    bucket.data = bucket.data[:2000]  # t1 (bytes 1024..3424) cut short
    with pytest.raises(WeightSyncError, match="'t1'"):
        unpack_bucket(bucket)


# ---------------------------------------------------------------------------- publish / receive


def _expected_state_numel(config) -> int:
    """Entries of the tiny Qwen2 state dict (tied lm_head listed too), from its config."""
    hidden, inter, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    head_dim = hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    # q (h·h + h), k and v (kv·h + kv each), o (h·h), gate/up/down (3·h·inter), 2 RMSNorms (2·h)
    per_layer = (hidden * hidden + hidden) + 2 * (kv * hidden + kv) + hidden * hidden + 3 * hidden * inter + 2 * hidden
    return 2 * vocab * hidden + config.num_hidden_layers * per_layer + hidden  # embed + lm_head, layers, final norm


def _publish(actor, store, bucket_kb: int, version: int = 3, dtype=torch.bfloat16) -> WeightPackage:
    package = publish_state_dict(
        iter_full_state_dict(actor),
        version=version,
        engine_dtype=dtype,
        bucket_bytes=bucket_kb * _KB,
        is_publisher=True,
        put=store.put,
    )
    assert package is not None
    return package


def test_package_sizes_of_the_tiny_model(tiny_model_dir):
    actor = perturbed_model(tiny_model_dir)
    store = DictStore()
    package = _publish(actor, store, bucket_kb=64)
    numel = _expected_state_numel(actor.config)
    # 2 layers, 2 + 2·12 + 1 = 27 entries (embed, lm_head, 12 per layer, final norm); bf16 = 2 bytes each
    assert package.num_tensors == len(actor.state_dict()) == 27
    assert package.total_bytes == 2 * numel
    assert package.dtype == "bfloat16" and package.version == 3
    assert len(store.objects) == len(package.bucket_refs) == len(package.bucket_bytes)
    # a bf16 decoder layer is 2 · 37,120 B = 72.5 KB > 64 KB: each layer alone; embed (V·64·2 B) and lm_head
    # alone; the final norm (128 B) joins lm_head. Every bucket is one layer/tensor or within 64 KB.
    entries = [store.get(ref).entries for ref in package.bucket_refs]
    for bucket_entries in entries:
        groups = {fusion_group(e.name) for e in bucket_entries}
        assert len(groups) == 1 or sum(e.nbytes for e in bucket_entries) <= 64 * _KB
    layer_buckets = [[e.name for e in b] for b in entries if fusion_group(b[0].name).startswith("model.layers.")]
    assert [len(names) for names in layer_buckets] == [12, 12]
    assert sum(e.nbytes for bucket_entries in entries for e in bucket_entries) == package.total_bytes
    # one bucket of everything when the limit is larger than the model
    assert len(_publish(actor, DictStore(), bucket_kb=4 * _KB).bucket_refs) == 1


def test_receive_loads_the_actor_weights_into_a_standalone_engine(tiny_model_dir):
    actor = perturbed_model(tiny_model_dir)
    engine = standalone_engine(tiny_model_dir, dtype="bfloat16")
    store = DictStore()
    package = _publish(actor, store, bucket_kb=16)
    metrics = receive_package(engine, package, engine_name="hf", get=store.get)
    for name, param in engine.model.named_parameters():
        assert torch.equal(param, actor.get_parameter(name).to(torch.bfloat16)), name
    assert metrics["rollout/weight_sync_buckets"] == len(package.bucket_refs) > 1
    assert metrics["rollout/weight_sync_tensors"] == 27
    assert metrics["rollout/weight_sync_verified_tensors"] >= 2
    assert metrics["rollout/weight_sync_mb"] == pytest.approx(package.total_bytes / 2**20)
    assert metrics["rollout/weight_sync_version"] == 3.0
    assert 0.0 <= metrics["rollout/weight_transfer_s"] <= metrics["rollout/weight_sync_s"]


def test_receive_raises_when_the_engine_drops_the_weights(tiny_model_dir):
    engine = standalone_engine(tiny_model_dir, dtype="bfloat16")
    engine.update_weights = lambda named_tensors: None  # an engine whose load silently does nothing
    store = DictStore()
    package = _publish(perturbed_model(tiny_model_dir), store, bucket_kb=16)
    with pytest.raises(WeightSyncError, match="embed_tokens"):
        receive_package(engine, package, engine_name="hf", get=store.get)


def test_receive_refuses_a_package_in_another_dtype(tiny_model_dir):
    engine = standalone_engine(tiny_model_dir, dtype="float32")
    store = DictStore()
    package = _publish(perturbed_model(tiny_model_dir), store, bucket_kb=16, dtype=torch.bfloat16)
    with pytest.raises(WeightSyncError, match=r"actor_rollout_ref.rollout.dtype"):
        receive_package(engine, package, engine_name="hf", get=store.get)


def test_non_publishing_ranks_drain_the_stream_and_first_package_picks_rank_zero():
    consumed = []

    def stream():
        for name, tensor in _named((4, torch.float32), (4, torch.float32)):
            consumed.append(name)
            yield name, tensor

    assert (
        publish_state_dict(stream(), version=1, engine_dtype=torch.float32, bucket_bytes=64, is_publisher=False) is None
    )
    assert consumed == ["t0", "t1"]  # a collective gather would have run on this rank too
    store = DictStore()
    package = publish_state_dict(
        stream(), version=1, engine_dtype=torch.float32, bucket_bytes=64, is_publisher=True, put=store.put
    )
    assert first_package([package, None]) is package
    with pytest.raises(ValueError, match="exactly one rank"):
        first_package([None, None])
