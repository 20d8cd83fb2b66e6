"""``DataProto.to_tensordict`` / ``DataProto.from_tensordict`` (verl 0.9): tensors, per-row Python objects and
meta_info through one TensorDict and back."""

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from hybridrl.protocol import DataProto


def _rows(items: list) -> np.ndarray:
    """A 1-D object array, one Python object per row (np.array would turn equal-length lists into 2-D)."""
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


def _data() -> DataProto:
    return DataProto.from_dict(
        tensors={"responses": torch.arange(6).reshape(3, 2), "scores": torch.tensor([0.5, 1.0, 0.0])},
        non_tensors={
            "uid": ["a", "b", "c"],
            "turn_scores": [[], [0.5, 0.8], [0.9]],  # ragged lists
            "pairs": _rows([[1, 2], [3, 4], [5, 6]]),  # equal-length lists: must stay one list per row
            "reward_extra_info": [{"acc": 1.0}, {"acc": 0.0}, {"acc": 1.0}],
            "raw_prompt": [[{"role": "user", "content": f"q{i}"}] for i in range(3)],
        },
        meta_info={"temperature": 0.7, "global_steps": 3, "metrics": {"x": [1, 2]}},
    )


def test_to_tensordict_layout():
    data = _data()
    td = data.to_tensordict()
    assert isinstance(td, TensorDict) and td.batch_size == torch.Size([3])
    torch.testing.assert_close(td["responses"], data.batch["responses"])
    assert isinstance(td.get("uid"), NonTensorStack) and list(td["uid"]) == ["a", "b", "c"]
    assert list(td["turn_scores"][1]) == [0.5, 0.8] and dict(td["reward_extra_info"][1]) == {"acc": 0.0}
    assert isinstance(td.get("temperature"), NonTensorData) and td["temperature"] == 0.7


def test_round_trip_keeps_every_part():
    data = _data()
    back = DataProto.from_tensordict(data.to_tensordict())
    assert set(back.batch.keys()) == {"responses", "scores"}
    for key in data.batch.keys():
        torch.testing.assert_close(back.batch[key], data.batch[key])
    assert back.non_tensor_batch.keys() == data.non_tensor_batch.keys()
    for key, values in data.non_tensor_batch.items():
        assert back.non_tensor_batch[key].dtype == object and back.non_tensor_batch[key].shape == (3,)
        assert back.non_tensor_batch[key].tolist() == values.tolist()
    assert back.non_tensor_batch["pairs"][0] == [1, 2]  # a row, not a 2-D array
    assert back.meta_info == data.meta_info
    assert len(back) == 3 and back[1:].non_tensor_batch["uid"].tolist() == ["b", "c"]


def test_from_tensordict_merges_given_meta_info():
    td = TensorDict({"obs": torch.zeros(2, 3, 4), "name": NonTensorData("run")}, batch_size=[2])
    data = DataProto.from_tensordict(td, meta_info={"step": 1})
    assert data.meta_info == {"step": 1, "name": "run"} and data.batch.batch_size == torch.Size([2])
    with pytest.raises(ValueError, match="num_batch_dims"):
        DataProto.from_tensordict(td, num_batch_dims=0)


def test_a_key_in_two_parts_is_refused():
    data = DataProto.from_dict(tensors={"x": torch.zeros(2)}, meta_info={"x": 1})
    with pytest.raises(ValueError, match=r"\['x'\]"):
        data.to_tensordict()


def test_non_tensor_only_data():
    data = DataProto.from_dict(non_tensors={"uid": np.array(["u", "v"], dtype=object)})
    back = DataProto.from_tensordict(data.to_tensordict())
    assert back.non_tensor_batch["uid"].tolist() == ["u", "v"] and len(back) == 2
