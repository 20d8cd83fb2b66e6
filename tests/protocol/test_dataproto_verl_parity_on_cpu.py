"""verl 0.5 parity: the behaviours verl's own CPU tests (``tests/test_protocol_on_cpu.py``) expect of
``verl.protocol``, checked against ``hybridrl.protocol`` on small hand-made batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from hybridrl.protocol import (
    DataProto,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)

pytestmark = pytest.mark.usefixtures("no_global_padding")


def three_rows() -> DataProto:
    """obs = [[1, 2], [3, 4], [5, 6]], labels = a, b, c, meta_info {"info": "test_info"}."""
    obs = torch.tensor([[1, 2], [3, 4], [5, 6]])
    return DataProto.from_dict(tensors={"obs": obs}, non_tensors={"labels": ["a", "b", "c"]}, meta_info={"info": "x"})


def obs_of(data: DataProto) -> list[list[int]]:
    assert data.batch is not None
    return data.batch["obs"].tolist()


def labels_of(data: DataProto) -> list[object]:
    return data.non_tensor_batch["labels"].tolist()


# ---------------------------------------------------------------------------- construction and len


def test_none_parts_are_empty_and_len_zero() -> None:
    """verl accepts ``None`` for ``non_tensor_batch`` (and ``batch``): such a DataProto has 0 rows."""
    data = DataProto(batch=None, non_tensor_batch=None, meta_info={"info": "x"})  # type: ignore[arg-type]
    assert len(data) == 0
    assert data.non_tensor_batch == {} and data.meta_info == {"info": "x"}
    assert len(DataProto(batch=None, non_tensor_batch={}, meta_info={"info": "x"})) == 0
    assert len(DataProto(meta_info=None)) == 0  # type: ignore[arg-type]
    labels = np.array(["a", "b", "c"], dtype=object)
    assert len(DataProto(batch=None, non_tensor_batch={"labels": labels})) == 3
    assert len(three_rows()) == 3


def test_from_dict_only_one_batch_dim() -> None:
    obs, act = torch.randn(6, 4), torch.randn(6, 4, 3)
    assert DataProto.from_dict(tensors={"obs": obs, "act": act}).batch.batch_size == torch.Size([6])  # type: ignore[union-attr]
    # obs and act share [6, 4]: the TensorDict gets two batch dims, which DataProto refuses.
    with pytest.raises(AssertionError, match="only support num_batch_dims=1"):
        DataProto.from_dict(tensors={"obs": obs, "act": act}, num_batch_dims=2)
    with pytest.raises(AssertionError, match="same batch size"):
        DataProto.from_dict(tensors={"obs": obs, "act": act}, num_batch_dims=3)


def test_from_single_dict_returns_the_subclass() -> None:
    class CustomProto(DataProto):
        pass

    assert type(CustomProto.from_single_dict({"x": torch.tensor([0])})) is CustomProto


def test_check_consistency_messages_keep_verl_wording() -> None:
    with pytest.raises(AssertionError, match="key labels length 2 is not equal to batch size 3"):
        DataProto(batch=TensorDict({"x": torch.zeros(3)}, [3]), non_tensor_batch={"labels": np.array(["a", "b"])})
    with pytest.raises(AssertionError, match="must be a numpy.array with dtype=object, but for key='uid'"):
        DataProto(non_tensor_batch={"uid": ["a"]})  # type: ignore[dict-item]


# ---------------------------------------------------------------------------- unions


def test_union_tensor_dict_shared_keys_must_match() -> None:
    obs = torch.randn(5, 3)
    left = TensorDict({"obs": obs, "act": torch.randn(5, 2)}, batch_size=[5])
    right = TensorDict({"obs": obs, "next_obs": torch.randn(5, 3)}, batch_size=[5])
    merged = union_tensor_dict(left, right)
    assert set(merged.keys()) == {"obs", "act", "next_obs"}
    # same obs values (a copy), but next_obs now differs from the one merged in.
    conflicting = TensorDict({"obs": obs.clone(), "next_obs": torch.randn(5, 3)}, batch_size=[5])
    with pytest.raises(AssertionError, match="next_obs"):
        union_tensor_dict(left, conflicting)


def test_union_numpy_dict_nan_strings_and_2d_object_arrays() -> None:
    values = np.random.default_rng(0).random(5)
    nans = np.array([float("nan")] * 4 + ["nan"], dtype=object)
    grid = np.tile(nans, (2, 1))  # [2, 5] object array
    left = {"a": values, "b": nans, "c": grid}
    union_numpy_dict(left, {"a": values.copy(), "b": nans.copy(), "c": grid.copy()})  # NaN == NaN here
    with pytest.raises(AssertionError, match="'a'"):
        union_numpy_dict(left, {"a": values + 1.0})


# ---------------------------------------------------------------------------- rows


def test_reorder_keeps_meta_info() -> None:
    data = DataProto.from_dict(
        tensors={"obs": torch.tensor([1, 2, 3, 4, 5, 6])}, non_tensors={"labels": list("abcdef")}, meta_info={"n": 1}
    )
    data.reorder(torch.tensor([3, 4, 2, 0, 1, 5]))
    assert data.batch["obs"].tolist() == [4, 5, 3, 1, 2, 6]  # type: ignore[index]
    assert labels_of(data) == ["d", "e", "c", "a", "b", "f"]
    assert data.meta_info == {"n": 1}


def test_chunk_and_concat_roundtrip() -> None:
    data = DataProto.from_dict(
        tensors={"obs": torch.tensor([1, 2, 3, 4, 5, 6])}, non_tensors={"labels": list("abcdef")}, meta_info={"n": 1}
    )
    with pytest.raises(AssertionError, match="only support equal chunk"):
        data.chunk(5)
    first, second = data.chunk(2)
    assert first.batch["obs"].tolist() == [1, 2, 3] and labels_of(second) == ["d", "e", "f"]  # type: ignore[index]
    assert first.meta_info == second.meta_info == {"n": 1}
    joined = DataProto.concat([first, second])
    assert torch.equal(joined.batch["obs"], data.batch["obs"])  # type: ignore[index]
    assert labels_of(joined) == labels_of(data) and joined.meta_info == data.meta_info


def test_uneven_chunk_sizes_follow_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERL_AUTO_PADDING", "1")
    # with a tensor batch: torch.chunk sizes, ceil(7 / 2) = 4 then 3.
    tensor_parts = DataProto.from_dict(tensors={"x": torch.arange(7)}).chunk(2)
    assert [len(p) for p in tensor_parts] == [4, 3]
    # without one: np.array_split sizes, 5 rows in 4 → 2, 1, 1, 1.
    parts = DataProto.from_dict(non_tensors={"labels": list("abcde")}).chunk(4)
    assert [labels_of(p) for p in parts] == [["a", "b"], ["c"], ["d"], ["e"]]


def test_pop_moves_batch_and_meta_keys() -> None:
    data = DataProto.from_dict({"obs": torch.randn(4, 2), "act": torch.randn(4, 3)}, meta_info={"2": 2, "1": 1})
    popped = data.pop(batch_keys=["obs"], meta_info_keys=["2"])
    assert set(popped.batch.keys()) == {"obs"} and popped.meta_info.keys() == {"2"}  # type: ignore[union-attr]
    assert set(data.batch.keys()) == {"act"} and data.meta_info.keys() == {"1"}  # type: ignore[union-attr]


def test_select_and_pop_without_tensor_batch() -> None:
    data = DataProto.from_dict(non_tensors={"labels": ["a", "b", "c"]}, meta_info={"info": "x"})
    assert labels_of(data.select(non_tensor_batch_keys=["labels"])) == ["a", "b", "c"]
    assert labels_of(data.pop(non_tensor_batch_keys=["labels"])) == ["a", "b", "c"]
    assert data.non_tensor_batch == {}


def test_repeat_interleaved_and_tiled() -> None:
    interleaved = three_rows().repeat(repeat_times=2, interleave=True)
    assert obs_of(interleaved) == [[1, 2], [1, 2], [3, 4], [3, 4], [5, 6], [5, 6]]
    assert labels_of(interleaved) == ["a", "a", "b", "b", "c", "c"]
    tiled = three_rows().repeat(repeat_times=2, interleave=False)
    assert obs_of(tiled) == [[1, 2], [3, 4], [5, 6], [1, 2], [3, 4], [5, 6]]
    assert labels_of(tiled) == ["a", "b", "c", "a", "b", "c"]
    assert interleaved.meta_info == tiled.meta_info == {"info": "x"}


@pytest.mark.parametrize(
    "counts", [[3, 1, 2], (3, 1, 2), torch.tensor([3, 1, 2]), np.array([3, 1, 2])], ids=["list", "tuple", "t", "np"]
)
def test_sample_level_repeat_accepts_verl_types(counts: object) -> None:
    repeated = three_rows().sample_level_repeat(counts)  # type: ignore[arg-type]
    assert obs_of(repeated) == [[1, 2], [1, 2], [1, 2], [3, 4], [5, 6], [5, 6]]
    assert labels_of(repeated) == ["a", "a", "a", "b", "c", "c"]
    assert repeated.meta_info == {"info": "x"}


def test_unfold_column_chunks_tensor_and_non_tensor_keys() -> None:
    obs1 = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    obs2 = torch.tensor([[1, 2], [5, 6], [9, 10]])
    pairs = [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]
    data = DataProto.from_dict(tensors={"obs1": obs1, "obs2": obs2}, non_tensors={"labels": pairs}, meta_info={"n": 1})
    out = data.unfold_column_chunks(2, split_keys=["obs1", "labels"])
    assert out.batch["obs1"].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]  # type: ignore[index]
    assert out.batch["obs2"].tolist() == [[1, 2], [1, 2], [5, 6], [5, 6], [9, 10], [9, 10]]  # type: ignore[index]
    assert labels_of(out) == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]
    # 3-D tensors split along dim 1 too; keys not split are repeated.
    cube = torch.arange(1, 13).repeat_interleave(2).view(3, 4, 2)  # row i: [[4i+1]*2, ..., [4i+4]*2]
    out = DataProto.from_dict(tensors={"cube": cube}, non_tensors={"labels": list("abc")}).unfold_column_chunks(
        2, split_keys=["cube"]
    )
    assert out.batch["cube"][:, :, 0].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]  # type: ignore[index]
    assert labels_of(out) == ["a", "a", "b", "b", "c", "c"]


@pytest.mark.parametrize(
    ("divisor", "pad", "expected_labels"),
    [(2, 1, list("abca")), (3, 0, list("abc")), (7, 4, list("abcabca"))],
)
def test_pad_to_divisor_cycles_rows(divisor: int, pad: int, expected_labels: list[str]) -> None:
    data = three_rows()
    padded, pad_size = pad_dataproto_to_divisor(data, size_divisor=divisor)
    assert pad_size == pad and labels_of(padded) == expected_labels
    assert padded.meta_info == {"info": "x"}
    restored = unpad_dataproto(padded, pad_size=pad_size)
    assert obs_of(restored) == obs_of(data) and labels_of(restored) == ["a", "b", "c"]


def test_fold_reorder_unfold() -> None:
    folded = fold_batch_dim(three_rows().repeat(2, interleave=True), new_batch_size=3)
    assert obs_of(folded) == [[[1, 2], [1, 2]], [[3, 4], [3, 4]], [[5, 6], [5, 6]]]
    assert labels_of(folded) == [["a", "a"], ["b", "b"], ["c", "c"]]
    folded.reorder(indices=torch.tensor([1, 2, 0]))
    unfolded = unfold_batch_dim(folded, batch_dims=2)
    assert obs_of(unfolded) == [[3, 4], [3, 4], [5, 6], [5, 6], [1, 2], [1, 2]]
    assert labels_of(unfolded) == ["b", "b", "c", "c", "a", "a"]
    assert unfolded.meta_info == {"info": "x"}


# ---------------------------------------------------------------------------- indexing


def _index_kinds(rng: np.random.Generator, rows: int) -> dict[str, object]:
    ints = rng.integers(0, rows, size=5)
    mask = rng.integers(0, 2, size=rows).astype(bool)
    return {
        "np_int": ints,
        "torch_int": torch.from_numpy(ints),
        "list_int": ints.tolist(),
        "np_bool": mask,
        "torch_bool": torch.from_numpy(mask),
        "list_bool": mask.tolist(),
    }


def test_index_with_every_verl_index_type() -> None:
    rng = np.random.default_rng(0)
    obs = torch.randn(20, 3)
    labels = np.array([f"l{i}" for i in range(20)], dtype=object)
    data = DataProto.from_dict(tensors={"obs": obs}, non_tensors={"labels": labels.copy()})
    for name, index in _index_kinds(rng, 20).items():
        as_np = np.asarray(index.numpy() if isinstance(index, torch.Tensor) else index)
        selected = data[index]  # type: ignore[index]
        assert isinstance(selected, DataProto), name
        assert torch.equal(selected.batch["obs"], obs[torch.from_numpy(as_np)]), name  # type: ignore[index]
        assert labels_of(selected) == labels[as_np].tolist(), name
        # the batch size stays a torch.Size of Python ints, so chunk/concat work after indexing.
        assert all(type(dim) is int for dim in selected.batch.batch_size), name  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- iteration and files


def test_make_iterator_same_seed_same_batches() -> None:
    data = DataProto.from_dict(tensors={"obs": torch.arange(20)}, non_tensors={"labels": [str(i) for i in range(20)]})

    def run() -> list[list[int]]:
        kwargs = {"shuffle": True}
        return [
            d.batch["obs"].tolist()
            for d in data.make_iterator(mini_batch_size=5, epochs=2, seed=1, dataloader_kwargs=kwargs)
        ]  # type: ignore[index]

    first = run()
    assert len(first) == 2 * 20 // 5 and first == run()
    assert sorted(sum(first[:4], [])) == list(range(20))  # one epoch visits every row once


def test_save_and_load_from_disk(tmp_path: Path) -> None:
    data = three_rows()
    data.save_to_disk(str(tmp_path / "data.pt"))
    loaded = DataProto.load_from_disk(str(tmp_path / "data.pt"))
    assert obs_of(loaded) == obs_of(data) and labels_of(loaded) == labels_of(data)
    assert loaded.meta_info == data.meta_info
