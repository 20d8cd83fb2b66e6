"""Issue 21 finding 1: DataProto.load_from_disk was a bare pickle.load. Files are safetensors + JSON now."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.utils.safe_state import decode_state, encode_state


class RunsShellCommand:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _rich_batch() -> DataProto:
    tensors = {"ids": torch.arange(6).view(3, 2), "adv": torch.tensor([[0.5], [1.5], [-2.0]], dtype=torch.bfloat16)}
    non_tensors = {
        "uid": ["a", "b", "c"],
        "reward_model": [{"ground_truth": "7", "style": "rule"}, {"ground_truth": "8"}, {"ground_truth": None}],
        "tools": [["calc", 1], [], ["x"]],
        "multi_modal": [np.arange(2, dtype=np.float32), None, np.zeros((1, 2), dtype=np.int64)],
    }
    meta = {"temperature": 0.7, "global_steps": 3, "metrics": {"a": [1.0, 2.0]}, "pair": (1, "x")}
    return DataProto.from_dict(tensors, non_tensors, meta_info=meta)


def test_save_and_load_keep_tensors_objects_and_meta_exactly(tmp_path: Path) -> None:
    data = _rich_batch()
    path = tmp_path / "batch.bin"
    data.save_to_disk(str(path))
    loaded = DataProto.load_from_disk(str(path))
    assert loaded.batch is not None and loaded.batch.batch_size == torch.Size([3])
    assert torch.equal(loaded.batch["ids"], data.batch["ids"]) and loaded.batch["adv"].dtype == torch.bfloat16
    assert torch.equal(loaded.batch["adv"], data.batch["adv"])
    assert list(loaded.non_tensor_batch["uid"]) == ["a", "b", "c"]
    assert loaded.non_tensor_batch["uid"].dtype == object and loaded.non_tensor_batch["uid"].shape == (3,)
    assert list(loaded.non_tensor_batch["reward_model"]) == list(data.non_tensor_batch["reward_model"])
    assert list(loaded.non_tensor_batch["tools"]) == [["calc", 1], [], ["x"]]  # list elements stay elements
    mm = loaded.non_tensor_batch["multi_modal"]
    assert mm[1] is None and mm[0].dtype == np.float32 and np.array_equal(mm[2], np.zeros((1, 2), dtype=np.int64))
    assert loaded.meta_info == data.meta_info and isinstance(loaded.meta_info["pair"], tuple)
    no_batch = DataProto.from_dict(non_tensors={"x": [1, 2]}, meta_info={"k": "v"})
    no_batch.save_to_disk(str(tmp_path / "nb.bin"))
    assert DataProto.load_from_disk(str(tmp_path / "nb.bin")).batch is None


def test_values_only_pickle_could_store_are_refused_on_save(tmp_path: Path) -> None:
    data = _rich_batch()
    data.meta_info["callback"] = RunsShellCommand("x")
    with pytest.raises(ValueError, match=r"save_to_disk.*meta_info.*callback.*RunsShellCommand"):
        data.save_to_disk(str(tmp_path / "bad.bin"))


def test_crafted_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker, path = tmp_path / "pwned", tmp_path / "data.pt"
    with open(path, "wb") as f:
        pickle.dump(RunsShellCommand(str(marker)), f)
    with pytest.raises(ValueError, match=r"data.pt is a pickle.*allow_pickle=True"):
        DataProto.load_from_disk(str(path))
    assert not marker.exists(), "the crafted pickle ran"
    path.write_bytes(b"not a dataproto file at all")
    with pytest.raises(ValueError, match="is not a safetensors file"):
        DataProto.load_from_disk(str(path))


def test_earlier_pickled_file_loads_only_with_allow_pickle(tmp_path: Path) -> None:
    data = _rich_batch()
    path = tmp_path / "old.pkl"
    with open(path, "wb") as f:
        pickle.dump(data, f)  # what DataProto.save_to_disk wrote before (verl's format)
    with pytest.raises(ValueError, match="is a pickle"):
        DataProto.load_from_disk(str(path))
    loaded = DataProto.load_from_disk(str(path), allow_pickle=True)
    assert torch.equal(loaded.batch["ids"], data.batch["ids"]) and loaded.meta_info == data.meta_info


def test_safe_state_codec_round_trips_rng_states_and_refuses_objects() -> None:
    import random

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             1: "int key", "nan": float("nan"), "np": np.int64(7), "bytes": b"\x00\xff", "u": np.array(["ab", "c"])}
    tree, tensors = encode_state(state)
    back = decode_state(tree, tensors)
    assert back["python"] == state["python"] and back[1] == "int key" and back["bytes"] == b"\x00\xff"
    assert back["numpy"][0] == "MT19937" and np.array_equal(back["numpy"][1], state["numpy"][1])
    assert back["numpy"][1].dtype == np.uint32 and back["numpy"][2:] == state["numpy"][2:]
    assert torch.equal(back["torch"], state["torch"]) and np.isnan(back["nan"])
    assert back["np"] == 7 and back["np"].dtype == np.int64 and list(back["u"]) == ["ab", "c"]
    with pytest.raises(TypeError, match=r"state.x\[1\]: a .*RunsShellCommand cannot be stored without pickle"):
        encode_state({"x": [1, RunsShellCommand("m")]})
