"""DataProto serialization, futures and the distributed all-gather."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from hybridrl.protocol import DataProto, DataProtoFuture, all_gather_data_proto, collate_fn


def make_batch(batch_size: int = 64, seq_len: int = 512) -> DataProto:
    """A realistic PPO-sized batch: token ids, masks, float per-token values, object columns."""
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "input_ids": torch.randint(0, 32000, (batch_size, seq_len), generator=generator),
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "old_log_probs": torch.randn(batch_size, seq_len // 2, generator=generator),
        "advantages": torch.randn(batch_size, seq_len // 2, generator=generator).to(torch.bfloat16),
    }
    non_tensors = {
        "uid": [f"u{i}" for i in range(batch_size)],
        "reward_model": [{"gt": str(i)} for i in range(batch_size)],
    }
    return DataProto.from_dict(tensors, non_tensors, meta_info={"temperature": 0.7, "metrics": {"a": 1}})


def assert_same(a: DataProto, b: DataProto) -> None:
    assert a.batch is not None and b.batch is not None
    assert sorted(a.batch.keys()) == sorted(b.batch.keys())
    for key in a.batch.keys():
        assert a.batch[key].dtype == b.batch[key].dtype, key
        assert torch.equal(a.batch[key], b.batch[key]), key
    assert a.non_tensor_batch.keys() == b.non_tensor_batch.keys()
    for key, val in a.non_tensor_batch.items():
        assert list(val) == list(b.non_tensor_batch[key]), key
    assert a.meta_info == b.meta_info


# ---------------------------------------------------------------------------- serialization


@pytest.mark.parametrize("method", ["torch", "numpy"])
def test_pickle_roundtrip_is_exact_and_fast(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    if method == "numpy":
        monkeypatch.setenv("VERL_DATAPROTO_SERIALIZATION_METHOD", "numpy")
    data = make_batch()
    start = time.perf_counter()
    restored = pickle.loads(pickle.dumps(data))
    elapsed = time.perf_counter() - start
    assert_same(data, restored)
    # measured ~2 ms (torch.save of the consolidated TensorDict) / ~0.3 ms (numpy) for 64×512;
    # 0.5 s leaves room for a loaded 2-core CI machine but catches a per-element pickling path.
    assert elapsed < 0.5


def test_pickle_state_is_bytes_plus_plain_parts() -> None:
    data = make_batch(4, 8)
    encoded, non_tensor, meta = data.__getstate__()
    assert isinstance(encoded, bytes)  # verl's format: torch.save bytes, non_tensor_batch, meta_info
    assert non_tensor is data.non_tensor_batch and meta is data.meta_info


def test_pickle_without_batch() -> None:
    data = DataProto.from_dict(non_tensors={"x": [1, 2]}, meta_info={"k": "v"})
    restored = pickle.loads(pickle.dumps(data))
    assert restored.batch is None
    assert list(restored.non_tensor_batch["x"]) == [1, 2] and restored.meta_info == {"k": "v"}


def test_save_and_load_from_disk(tmp_path: Path) -> None:
    data = make_batch(8, 16)
    path = tmp_path / "batch.pkl"
    data.save_to_disk(str(path))
    assert path.stat().st_size > 0
    assert_same(data, DataProto.load_from_disk(str(path)))


def test_print_size(capsys: pytest.CaptureFixture[str]) -> None:
    data = DataProto.from_dict({"x": torch.zeros(1024, 256, dtype=torch.float32)})
    data.print_size(prefix="rollout")
    out = capsys.readouterr().out
    # 1024 * 256 * 4 bytes = 1 MiB = 1/1024 GB = 0.0009765625 GB.
    assert out.startswith("rollout, Size of tensordict: 0.0009765625 GB")


def test_collate_fn_stacks_items() -> None:
    data = make_batch(4, 8)
    stacked = collate_fn([data[2], data[0]])
    assert stacked.batch["input_ids"].tolist() == data.batch["input_ids"][[2, 0]].tolist()
    assert list(stacked.non_tensor_batch["uid"]) == ["u2", "u0"]


# ---------------------------------------------------------------------------- futures


def test_future_get_collects_then_dispatches_plain_objects() -> None:
    parts = [DataProto.from_dict({"x": torch.tensor([0, 1])}), DataProto.from_dict({"x": torch.tensor([2, 3])})]
    calls: list[int] = []

    def collect(outputs: list[DataProto]) -> DataProto:
        calls.append(len(outputs))
        return DataProto.concat(outputs)

    future = DataProtoFuture(collect_fn=collect, futures=parts)
    assert future.get().batch["x"].tolist() == [0, 1, 2, 3]
    chunks = future.chunk(2)
    assert calls == [2]  # chunk() itself fetches nothing
    assert [c.get().batch["x"].tolist() for c in chunks] == [[0, 1], [2, 3]]
    assert calls == [2, 2, 2]


def test_future_concat_uses_dataproto_concat() -> None:
    parts = [DataProto.from_dict({"x": torch.tensor([i])}) for i in range(3)]
    future = DataProtoFuture.concat(parts)
    assert future.dispatch_fn is None
    assert future.get().batch["x"].tolist() == [0, 1, 2]


def test_protocol_import_does_not_import_ray() -> None:
    code = "import sys, hybridrl.protocol; from hybridrl import DataProto; print('ray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_future_with_ray_object_refs(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    refs = [ray_cluster.put(DataProto.from_dict({"x": torch.tensor([2 * i, 2 * i + 1])})) for i in range(2)]
    future = DataProtoFuture.concat(refs)
    assert future.get().batch["x"].tolist() == [0, 1, 2, 3]
    assert future.chunk(2)[1].get().batch["x"].tolist() == [2, 3]


# ---------------------------------------------------------------------------- all-gather

_GATHER_SCRIPT = """
import os, sys, numpy as np, torch, torch.distributed as dist
from hybridrl.protocol import DataProto, all_gather_data_proto
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
data = DataProto.from_dict({"x": torch.tensor([rank * 10, rank * 10 + 1])}, {"who": [f"r{rank}a", f"r{rank}b"]})
all_gather_data_proto(data, process_group=None)
print(data.batch["x"].tolist(), list(data.non_tensor_batch["who"]))
dist.destroy_process_group()
"""


def test_all_gather_single_process_group(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        data = DataProto.from_dict({"x": torch.tensor([1, 2])}, {"who": ["a", "b"]})
        all_gather_data_proto(data, process_group=None)
        assert data.batch["x"].tolist() == [1, 2]
        assert list(data.non_tensor_batch["who"]) == ["a", "b"]
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_all_gather_two_processes() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _GATHER_SCRIPT, str(rank), port], stdout=subprocess.PIPE, text=True, env=env
        )
        for rank in range(2)
    ]
    outputs = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    expected = "[0, 1, 10, 11] ['r0a', 'r0b', 'r1a', 'r1b']"
    assert outputs == [expected, expected]


def test_non_tensor_arrays_stay_object_dtype_after_roundtrip() -> None:
    data = make_batch(2, 4)
    restored = pickle.loads(pickle.dumps(data))
    assert restored.non_tensor_batch["reward_model"].dtype == np.dtype(object)
    assert restored.non_tensor_batch["reward_model"][1] == {"gt": "1"}
