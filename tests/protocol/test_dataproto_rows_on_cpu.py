"""DataProto row operations: chunk/split/concat, repeat, reorder, padding, folding, iteration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.protocol import (
    DataProto,
    DataProtoConfig,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    unpad_dataproto,
)


def make_data(batch_size: int, meta_info: dict[str, object] | None = None) -> DataProto:
    """act[i] = i, obs[i] = [10i, 10i+1], labels[i] = f'l{i}'."""
    act = torch.arange(batch_size)
    obs = torch.stack([act * 10, act * 10 + 1], dim=1)
    labels = [f"l{i}" for i in range(batch_size)]
    return DataProto.from_dict(
        tensors={"act": act, "obs": obs}, non_tensors={"labels": labels}, meta_info=dict(meta_info or {"t": 1})
    )


def acts(data: DataProto) -> list[int]:
    return data.batch["act"].tolist()


pytestmark = pytest.mark.usefixtures("no_global_padding")


# ---------------------------------------------------------------------------- chunk / split / concat


def test_chunk_even_passes_meta_to_each() -> None:
    parts = make_data(6).chunk(3)
    assert [acts(p) for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert [list(p.non_tensor_batch["labels"]) for p in parts][2] == ["l4", "l5"]
    assert all(p.meta_info == {"t": 1} for p in parts)


def test_chunk_uneven_without_padding_raises_with_sizes() -> None:
    with pytest.raises(AssertionError, match="size of DataProto 5 and chunk 2"):
        make_data(5).chunk(2)


def test_chunk_uneven_with_meta_padding_flag() -> None:
    data = make_data(5)
    data.meta_info["_verl_auto_padding"] = True
    # torch.chunk sizes: ceil(5/2)=3 then 2.
    assert [acts(p) for p in data.chunk(2)] == [[0, 1, 2], [3, 4]]


@pytest.mark.parametrize("env", ["VERL_AUTO_PADDING", "HYBRIDRL_AUTO_PADDING"])
def test_chunk_uneven_with_env_padding(monkeypatch: pytest.MonkeyPatch, env: str) -> None:
    monkeypatch.setenv(env, "1")
    assert make_data(3).is_padding_enabled()
    # 10 rows in 4: ceil(10/4)=3 → 3, 3, 3, 1.
    assert [len(p) for p in make_data(10).chunk(4)] == [3, 3, 3, 1]


def test_chunk_with_config_padding_always_returns_requested_count() -> None:
    DataProtoConfig.auto_padding = True
    assert DataProtoConfig.auto_padding is True
    # torch.chunk gives only 3 parts for 5 rows / 4 (2, 2, 1); the 4th is empty.
    assert [len(p) for p in make_data(5).chunk(4)] == [2, 2, 1, 0]
    with pytest.raises(AssertionError, match="bool"):
        DataProtoConfig.auto_padding = "yes"  # type: ignore[assignment]


def test_chunk_without_batch() -> None:
    data = DataProto.from_dict(non_tensors={"labels": ["a", "b", "c", "d"]})
    assert [list(p.non_tensor_batch["labels"]) for p in data.chunk(2)] == [["a", "b"], ["c", "d"]]


def test_split_last_part_shorter() -> None:
    assert [acts(p) for p in make_data(5).split(2)] == [[0, 1], [2, 3], [4]]


def test_concat_roundtrip_and_metrics_merge() -> None:
    parts = make_data(4).chunk(2)
    parts[0].meta_info = {"t": 1, "metrics": {"loss": 1.0}}
    parts[1].meta_info = {"t": 1, "metrics": [{"loss": 2.0}, {"loss": 3.0}]}
    merged = DataProto.concat(parts)
    assert acts(merged) == [0, 1, 2, 3]
    assert list(merged.non_tensor_batch["labels"]) == ["l0", "l1", "l2", "l3"]
    # metrics from every worker are flattened into a dict of lists.
    assert merged.meta_info == {"t": 1, "metrics": {"loss": [1.0, 2.0, 3.0]}}


def test_concat_averages_per_worker_timing() -> None:
    parts = make_data(4).chunk(2)
    parts[0].meta_info = {"t": 1, "timing": {"gen": 1.0, "sync": 0.5}}
    parts[1].meta_info = {"t": 1, "timing": {"gen": 3.0}}
    # gen: (1 + 3) / 2 = 2; sync only reported by one worker: 0.5
    assert DataProto.concat(parts).meta_info == {"t": 1, "timing": {"gen": 2.0, "sync": 0.5}}


def test_concat_conflicting_meta_names_key() -> None:
    with pytest.raises(AssertionError, match="'t'"):
        DataProto.concat([make_data(2, {"t": 1}), make_data(2, {"t": 2})])


def test_concat_without_batch() -> None:
    a = DataProto.from_dict(non_tensors={"x": [1, 2]})
    b = DataProto.from_dict(non_tensors={"x": [3]})
    merged = DataProto.concat([a, b])
    assert merged.batch is None and list(merged.non_tensor_batch["x"]) == [1, 2, 3]


# ---------------------------------------------------------------------------- repeat / reorder


def test_repeat_interleave_vs_tile() -> None:
    data = make_data(2)
    inter = data.repeat(repeat_times=3, interleave=True)
    tiled = data.repeat(repeat_times=3, interleave=False)
    assert acts(inter) == [0, 0, 0, 1, 1, 1]
    assert acts(tiled) == [0, 1, 0, 1, 0, 1]
    assert inter.batch["obs"][3].tolist() == [10, 11]
    assert tiled.batch["obs"][3].tolist() == [10, 11]
    assert list(inter.non_tensor_batch["labels"]) == ["l0"] * 3 + ["l1"] * 3
    assert list(tiled.non_tensor_batch["labels"]) == ["l0", "l1"] * 3
    assert inter.meta_info == data.meta_info


def test_sample_level_repeat() -> None:
    data = make_data(3)
    for counts in ([2, 0, 1], (2, 0, 1), np.array([2, 0, 1]), torch.tensor([2, 0, 1])):
        out = data.sample_level_repeat(counts)
        assert acts(out) == [0, 0, 2]
        assert list(out.non_tensor_batch["labels"]) == ["l0", "l0", "l2"]
    with pytest.raises(AssertionError, match="length 3"):
        data.sample_level_repeat([1, 2])


def test_reorder_in_place() -> None:
    data = make_data(4)
    assert data.reorder(torch.tensor([3, 1, 0, 2])) is None
    assert acts(data) == [3, 1, 0, 2]
    assert list(data.non_tensor_batch["labels"]) == ["l3", "l1", "l0", "l2"]


def test_unfold_column_chunks() -> None:
    data = DataProto.from_dict(
        tensors={"pair": torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), "score": torch.tensor([0.5, 1.5])},
        non_tensors={"grouped": np.array([["a", "b"], ["c", "d"]], dtype=object), "uid": ["u0", "u1"]},
    )
    out = data.unfold_column_chunks(2, split_keys=["pair", "grouped"])
    # [2, 4] → [4, 2]; the other keys repeat each row twice.
    assert out.batch["pair"].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert out.batch["score"].tolist() == [0.5, 0.5, 1.5, 1.5]
    assert out.non_tensor_batch["grouped"].tolist() == [["a"], ["b"], ["c"], ["d"]]
    assert list(out.non_tensor_batch["uid"]) == ["u0", "u0", "u1", "u1"]


def test_fold_and_unfold_batch_dim_roundtrip() -> None:
    data = make_data(6)
    folded = fold_batch_dim(data, new_batch_size=2)
    assert folded.batch.batch_size == torch.Size([2])
    assert folded.batch["obs"].shape == (2, 3, 2)
    assert folded.non_tensor_batch["labels"].shape == (2, 3)
    restored = unfold_batch_dim(folded, batch_dims=2)
    assert acts(restored) == list(range(6))
    assert list(restored.non_tensor_batch["labels"]) == [f"l{i}" for i in range(6)]
    with pytest.raises(AssertionError, match="not divisible by 4"):
        fold_batch_dim(make_data(6), new_batch_size=4)


# ---------------------------------------------------------------------------- padding


@pytest.mark.parametrize(("size", "divisor", "pad"), [(5, 4, 3), (3, 8, 5), (4, 4, 0), (7, 1, 0)])
def test_pad_to_divisor_and_back(size: int, divisor: int, pad: int) -> None:
    data = make_data(size)
    padded, pad_size = pad_dataproto_to_divisor(data, divisor)
    assert pad_size == pad
    assert len(padded) % divisor == 0
    # padding cycles from row 0: 3 rows to 8 appends 0,1,2 then 0,1.
    if (size, divisor) == (3, 8):
        assert acts(padded) == [0, 1, 2, 0, 1, 2, 0, 1]
    restored = unpad_dataproto(padded, pad_size)
    assert acts(restored) == acts(data)
    assert list(restored.non_tensor_batch["labels"]) == list(data.non_tensor_batch["labels"])


def test_padding_method_last_and_first() -> None:
    data = make_data(3)
    data.padding(2)
    assert acts(data) == [0, 1, 2, 2, 2]
    data = make_data(3)
    data.padding(1, padding_candidate="first")
    assert acts(data) == [0, 1, 2, 0]
    assert list(data.non_tensor_batch["labels"]) == ["l0", "l1", "l2", "l0"]


# ---------------------------------------------------------------------------- iteration


def test_make_iterator_epochs_and_meta() -> None:
    data = make_data(6, {"t": 3})
    batches = list(data.make_iterator(mini_batch_size=2, epochs=2))
    # 6 rows / 2 per batch × 2 epochs = 6 mini-batches, in order without shuffle.
    assert [acts(b) for b in batches] == [[0, 1], [2, 3], [4, 5]] * 2
    assert all(b.meta_info == {"t": 3} for b in batches)
    assert list(batches[1].non_tensor_batch["labels"]) == ["l2", "l3"]


def test_make_iterator_seeded_shuffle_is_deterministic() -> None:
    data = make_data(8)
    kwargs = {"shuffle": True}
    first = [acts(b) for b in data.make_iterator(2, epochs=2, seed=7, dataloader_kwargs=kwargs)]
    second = [acts(b) for b in data.make_iterator(2, epochs=2, seed=7, dataloader_kwargs=kwargs)]
    other = [acts(b) for b in data.make_iterator(2, epochs=2, seed=8, dataloader_kwargs=kwargs)]
    assert first == second
    assert first != other
    # every epoch is a permutation of all rows.
    assert sorted(sum(first[:4], [])) == list(range(8))
    assert first[:4] != first[4:]  # the generator advances between epochs


def test_make_iterator_requires_divisible_batch() -> None:
    with pytest.raises(AssertionError, match="5 % 2"):
        make_data(5).make_iterator(2, epochs=1)
