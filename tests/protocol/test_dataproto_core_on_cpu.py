"""DataProto construction, indexing, key operations and unions (verl v0.5 semantics)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from hybridrl.protocol import (
    DataProto,
    DataProtoItem,
    union_numpy_dict,
    union_tensor_dict,
)


def make_data(batch_size: int = 4) -> DataProto:
    """obs[i] = [2i, 2i+1], act[i] = i, labels = 'a','b',..., meta {'temperature': 1.0}."""
    obs = torch.arange(batch_size * 2).view(batch_size, 2)
    act = torch.arange(batch_size)
    labels = [chr(ord("a") + i) for i in range(batch_size)]
    return DataProto.from_dict(
        tensors={"obs": obs, "act": act}, non_tensors={"labels": labels}, meta_info={"temperature": 1.0}
    )


# ---------------------------------------------------------------------------- construction


def test_from_dict_builds_tensordict_and_object_arrays() -> None:
    data = make_data(4)
    assert isinstance(data.batch, TensorDict)
    assert data.batch.batch_size == torch.Size([4])
    assert data.non_tensor_batch["labels"].dtype == object
    assert list(data.non_tensor_batch["labels"]) == ["a", "b", "c", "d"]
    assert len(data) == 4


def test_from_dict_batch_size_mismatch_names_both_keys() -> None:
    with pytest.raises(AssertionError, match=r"'obs' has \[4\], 'act' has \[3\]"):
        DataProto.from_dict(tensors={"obs": torch.zeros(4, 2), "act": torch.zeros(3)})


def test_non_tensor_length_mismatch_names_the_key() -> None:
    with pytest.raises(AssertionError, match="labels"):
        DataProto.from_dict(tensors={"obs": torch.zeros(4, 2)}, non_tensors={"labels": ["a", "b"]})


def test_non_tensor_must_be_ndarray() -> None:
    with pytest.raises(AssertionError, match="uid"):
        DataProto(batch=None, non_tensor_batch={"uid": ["x"]})  # type: ignore[dict-item]


def test_from_single_dict_splits_tensors_and_arrays() -> None:
    data = DataProto.from_single_dict(
        {"obs": torch.ones(2, 3), "uid": np.array(["u0", "u1"], dtype=object)}, auto_padding=True
    )
    assert list(data.batch.keys()) == ["obs"]
    assert list(data.non_tensor_batch) == ["uid"]
    assert data.meta_info["_verl_auto_padding"] is True
    with pytest.raises(ValueError, match="bad"):
        DataProto.from_single_dict({"bad": [1, 2]})  # type: ignore[dict-item]


def test_len_without_batch_uses_non_tensor() -> None:
    data = DataProto.from_dict(non_tensors={"labels": ["x", "y", "z"]})
    assert data.batch is None
    assert len(data) == 3
    assert len(DataProto()) == 0


def test_from_dict_num_batch_dims_2_requires_no_non_tensors() -> None:
    with pytest.raises(AssertionError, match="num_batch_dims=1"):
        DataProto.from_dict(tensors={"obs": torch.zeros(2, 3)}, non_tensors={}, num_batch_dims=2)


# ---------------------------------------------------------------------------- indexing


def test_int_index_returns_item() -> None:
    item = make_data(4)[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["obs"].tolist() == [4, 5]  # obs[2] = [2*2, 2*2+1]
    assert item.non_tensor_batch["labels"] == "c"
    assert item.meta_info == {"temperature": 1.0}
    assert make_data(4)[np.int64(1)].non_tensor_batch["labels"] == "b"


def test_slice_index_returns_dataproto_view() -> None:
    data = make_data(6)
    part = data[1:5:2]
    assert isinstance(part, DataProto)
    assert part.batch["act"].tolist() == [1, 3]
    assert list(part.non_tensor_batch["labels"]) == ["b", "d"]
    assert part.meta_info == data.meta_info


@pytest.mark.parametrize("index", [[3, 0], np.array([3, 0]), torch.tensor([3, 0])])
def test_list_array_tensor_index(index: object) -> None:
    part = make_data(5)[index]  # type: ignore[index]
    assert part.batch["act"].tolist() == [3, 0]
    assert list(part.non_tensor_batch["labels"]) == ["d", "a"]


@pytest.mark.parametrize(
    "mask", [[True, False, True, False], np.array([1, 0, 1, 0], dtype=bool), torch.tensor([1, 0, 1, 0]).bool()]
)
def test_bool_mask_index(mask: object) -> None:
    part = make_data(4)[mask]  # type: ignore[index]
    assert len(part) == 2
    assert part.batch["act"].tolist() == [0, 2]
    assert list(part.non_tensor_batch["labels"]) == ["a", "c"]


def test_unsupported_index_type() -> None:
    with pytest.raises(TypeError, match="str"):
        make_data(2)["obs"]  # type: ignore[index]


# ---------------------------------------------------------------------------- keys


def test_select_keeps_only_requested_keys_and_shares_tensors() -> None:
    data = make_data(3)
    data.meta_info["extra"] = 7
    sub = data.select(batch_keys=["obs"], non_tensor_batch_keys=["labels"], meta_info_keys=["extra"])
    assert list(sub.batch.keys()) == ["obs"]
    assert sub.meta_info == {"extra": 7}
    sub.batch["obs"][0, 0] = 100
    assert data.batch["obs"][0, 0] == 100  # a view, as in verl


def test_select_deepcopy_copies_non_tensor_and_meta() -> None:
    data = make_data(2)
    data.meta_info["cfg"] = {"a": 1}
    sub = data.select(deepcopy=True)
    sub.meta_info["cfg"]["a"] = 2
    sub.non_tensor_batch["labels"][0] = "z"
    assert data.meta_info["cfg"]["a"] == 1
    assert data.non_tensor_batch["labels"][0] == "a"


def test_select_missing_key_is_named() -> None:
    with pytest.raises(AssertionError, match="responses"):
        make_data(2).select(batch_keys=["responses"])


def test_pop_moves_keys_out() -> None:
    data = make_data(3)
    popped = data.pop(batch_keys=["act"], non_tensor_batch_keys=["labels"], meta_info_keys=["temperature"])
    assert list(data.batch.keys()) == ["obs"]
    assert data.non_tensor_batch == {} and data.meta_info == {}
    assert popped.batch["act"].tolist() == [0, 1, 2]
    assert list(popped.non_tensor_batch["labels"]) == ["a", "b", "c"]
    assert popped.meta_info == {"temperature": 1.0}


def test_pop_missing_key_is_named() -> None:
    with pytest.raises(AssertionError, match="'values'"):
        make_data(2).pop(batch_keys=["values"])
    with pytest.raises(AssertionError, match="'uid'"):
        make_data(2).pop(non_tensor_batch_keys=["uid"])


def test_rename_batch_keys_in_place() -> None:
    data = make_data(2)
    out = data.rename(old_keys=["obs", "act"], new_keys=["observations", "actions"])
    assert out is data
    assert sorted(data.batch.keys()) == ["actions", "observations"]
    data.rename("actions", "a")
    assert "a" in data.batch.keys()
    with pytest.raises(ValueError, match="same length"):
        data.rename(["a"], ["b", "c"])
    with pytest.raises(AssertionError, match="'missing'"):
        data.rename("missing", "x")
    with pytest.raises(TypeError):
        data.rename(("a",), ("b",))  # type: ignore[arg-type]


def test_to_device_returns_self() -> None:
    data = make_data(2)
    assert data.to("cpu") is data
    assert data.batch.device == torch.device("cpu")


# ---------------------------------------------------------------------------- union


def test_union_merges_all_three_parts() -> None:
    left = make_data(3)
    right = DataProto.from_dict(
        tensors={"obs": left.batch["obs"].clone(), "rew": torch.ones(3)},
        non_tensors={"labels": ["a", "b", "c"], "uid": ["u", "v", "w"]},
        meta_info={"temperature": 1.0, "step": 5},
    )
    out = left.union(right)
    assert out is left
    assert sorted(left.batch.keys()) == ["act", "obs", "rew"]
    assert sorted(left.non_tensor_batch) == ["labels", "uid"]
    assert left.meta_info == {"temperature": 1.0, "step": 5}


def test_union_conflicting_tensor_names_key_and_shapes() -> None:
    left = DataProto.from_dict(tensors={"responses": torch.zeros(4, 8, dtype=torch.long)})
    right = DataProto.from_dict(tensors={"responses": torch.zeros(4, 9, dtype=torch.long)})
    with pytest.raises(AssertionError, match=r"'responses'.*\[4, 8\].*\[4, 9\]"):
        left.union(right)


def test_union_conflicting_values_same_shape() -> None:
    left = DataProto.from_dict(tensors={"x": torch.zeros(2)})
    right = DataProto.from_dict(tensors={"x": torch.ones(2)})
    with pytest.raises(AssertionError, match="'x'"):
        left.union(right)


def test_union_batch_size_mismatch() -> None:
    with pytest.raises(AssertionError, match=r"\[2\] and \[3\]"):
        union_tensor_dict(TensorDict({"a": torch.zeros(2)}, [2]), TensorDict({"b": torch.zeros(3)}, [3]))


def test_union_numpy_dict_nan_and_objects_are_equal() -> None:
    # NaN == NaN and nested dicts compare by value, so identical non-tensor data unions cleanly.
    left = {"score": np.array([np.nan, 1.0]), "rm": np.array([{"gt": "1"}, {"gt": "2"}], dtype=object)}
    right = {"score": np.array([np.nan, 1.0]), "rm": np.array([{"gt": "1"}, {"gt": "2"}], dtype=object)}
    assert union_numpy_dict(left, right) is left
    with pytest.raises(AssertionError, match="'rm'"):
        union_numpy_dict(left, {"rm": np.array([{"gt": "1"}, {"gt": "3"}], dtype=object)})


def test_union_conflicting_meta_info_names_key() -> None:
    left = make_data(2)
    right = make_data(2)
    right.meta_info["temperature"] = 0.5
    with pytest.raises(AssertionError, match="'temperature'"):
        left.union(right)
