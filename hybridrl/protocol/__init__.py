"""The data protocol between the driver and the workers (verl v0.5's ``verl.protocol``).

Modules, by concept (imports point down this list, never up):

    keys            the canonical batch keys of a PPO step: shape and the stage that adds each one
    checks          checks on a DataProto's parts and method arguments (AssertionError, verl's wording)
    rows            row arithmetic on tensors/arrays: index normalization, chunk sizes, tiling
    merge           union_tensor_dict / union_numpy_dict / union_two_dict, meta_info merging on concat
    auto_padding    DataProtoConfig: the switch that lets chunk/dispatch split unevenly
    serialization   pickling of the tensor batch, save_to_disk / load_from_disk
    tensordict_conversion   a DataProto as one TensorDict and back (to_tensordict / from_tensordict)
    data_proto      DataProto, DataProtoItem, collate_fn
    padding         pad_dataproto_to_divisor / unpad_dataproto
    folding         fold_batch_dim / unfold_batch_dim
    futures         DataProtoFuture, all_gather_data_proto

Everything verl's ``verl/protocol.py`` defines is importable from here, under the same names.
"""

from __future__ import annotations

from hybridrl.protocol.auto_padding import DataProtoConfig
from hybridrl.protocol.checks import as_key_list as as_key_list
from hybridrl.protocol.checks import check_rows as check_rows
from hybridrl.protocol.checks import common_batch_size as common_batch_size
from hybridrl.protocol.checks import require as require
from hybridrl.protocol.checks import require_batch as require_batch
from hybridrl.protocol.data_proto import DataProto, DataProtoItem, collate_fn
from hybridrl.protocol.data_proto import Index as Index
from hybridrl.protocol.folding import fold_batch_dim, unfold_batch_dim
from hybridrl.protocol.futures import DataProtoFuture, all_gather_data_proto
from hybridrl.protocol.keys import BATCH_KEYS, BatchKey
from hybridrl.protocol.merge import list_of_dict_to_dict_of_list, union_numpy_dict, union_tensor_dict, union_two_dict
from hybridrl.protocol.merge import merge_meta_info as merge_meta_info
from hybridrl.protocol.padding import _padding_size_key as _padding_size_key
from hybridrl.protocol.padding import pad_dataproto_to_divisor, unpad_dataproto
from hybridrl.protocol.rows import chunk_sizes as chunk_sizes
from hybridrl.protocol.rows import normalize_row_index as normalize_row_index
from hybridrl.protocol.rows import tensor_items as tensor_items
from hybridrl.protocol.rows import tile_rows as tile_rows
from hybridrl.protocol.rows import unfold_or_repeat_rows as unfold_or_repeat_rows
from hybridrl.protocol.serialization import (
    deserialize_single_tensor,
    deserialize_tensordict,
    serialize_single_tensor,
    serialize_tensordict,
)

# The ``X as X`` imports above are helpers importable from here since before the package split (not
# verl API; new code imports them from their modules), and verl's module-level ``_padding_size_key``.
__all__ = [
    "BATCH_KEYS",
    "BatchKey",
    "DataProto",
    "DataProtoConfig",
    "DataProtoFuture",
    "DataProtoItem",
    "all_gather_data_proto",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
    "unpad_dataproto",
]
