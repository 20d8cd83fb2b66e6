"""``hybridrl.utils.tensordict_utils.get_tensordict`` (verl 0.9): per-row tensors and Python objects plus
whole-batch values in one TensorDict."""

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack

from hybridrl.utils.tensordict_utils import get_tensordict


def test_rows_objects_and_batch_values():
    td = get_tensordict(
        {"obs": torch.arange(3), "labels": ["a", "b", "c"], "scores": np.array([[], [0.5], [0.9, 1.0]], dtype=object)},
        {"name": "run", "step": 2},
    )
    assert td.batch_size == torch.Size([3])
    assert isinstance(td.get("labels"), NonTensorStack) and list(td["labels"]) == ["a", "b", "c"]
    assert list(td["scores"][2]) == [0.9, 1.0]
    assert isinstance(td.get("name"), NonTensorData) and td["name"] == "run" and td["step"] == 2


def test_batch_values_only():
    assert get_tensordict({}, {"name": "x"}).batch_size == torch.Size([])


@pytest.mark.parametrize(
    "tensor_dict, non_tensor_dict, match",
    [
        ({"obs": torch.arange(3), "labels": ["a", "b"]}, None, "2 rows"),
        ({"obs": [torch.zeros(1)]}, None, "list of tensors"),
        ({"obs": 3}, None, "int"),
        ({"obs": torch.arange(2)}, {"obs": 1}, "in both"),
    ],
)
def test_errors(tensor_dict, non_tensor_dict, match):
    with pytest.raises(ValueError, match=match):
        get_tensordict(tensor_dict, non_tensor_dict)
