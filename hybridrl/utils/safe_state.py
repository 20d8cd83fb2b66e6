"""State files that load without running code: JSON for the structure, safetensors for the tensors.

A state (nested dicts/lists/tuples of plain values, torch tensors, NumPy arrays and scalars) is written
either as a pair (checkpoints, :func:`save_state`)

    {prefix}.safetensors   every tensor and NumPy array (arrays as raw bytes), keyed "t0", "t1", ...
    {prefix}.json          the structure; written last (its presence means the pair is complete)

or as one safetensors file whose header metadata holds the JSON structure (:func:`save_single_file`).

Encoding of a node (JSON): ``None``/bool/int/float/str as is, a list as a list, a dict with string keys
as an object; everything else is an object with a ``"__type__"`` tag:
``tuple`` (``items``), ``dict`` with non-string keys (``items``: ``[[key, value], ...]``), ``tensor``
(``name``), ``ndarray`` (``name``, ``dtype`` as ``numpy.dtype.str``, ``shape``; numeric, bool, string
and datetime dtypes), ``objarray`` (a NumPy object array: ``shape`` and its elements, each encoded by
these same rules), ``npscalar`` (``dtype``, ``value``), ``bytes`` (``hex``). Python RNG state is a tuple
of ints, NumPy's legacy RNG state a tuple with a ``uint32`` array, torch's a ``uint8`` tensor: all
covered. Any other type (an arbitrary object, a structured array) is refused with
:class:`UnsafeStateError` naming where it is.

Loading parses JSON and reads safetensors: nothing in either file can run code.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hybridrl.utils.fs import atomic_write_text, replacing_file

TYPE_TAG = "__type__"
JSON_SUFFIX = ".json"
TENSORS_SUFFIX = ".safetensors"
FORMAT = "hybridrl-safe-state-v1"
_RAW_ARRAY_KINDS = "biufcSUmM"  # dtypes whose raw bytes + dtype string rebuild the array exactly


class UnsafeStateError(TypeError):
    """A value that the safe format cannot store (it would need pickle)."""


class _Encoder:
    """Turns a state into a JSON tree, collecting tensors into ``self.tensors``."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def _add_tensor(self, tensor: torch.Tensor) -> str:
        name = f"t{len(self.tensors)}"
        self.tensors[name] = tensor.detach().cpu().contiguous().clone()
        return name

    def encode(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, tuple):
            return {TYPE_TAG: "tuple", "items": [self.encode(item, f"{where}[{i}]") for i, item in enumerate(value)]}
        if isinstance(value, dict):
            return self._encode_dict(value, where)
        if isinstance(value, torch.Tensor):
            return {TYPE_TAG: "tensor", "name": self._add_tensor(value)}
        if isinstance(value, np.ndarray):
            return self._encode_ndarray(value, where)
        if isinstance(value, np.generic) and value.dtype.kind in "biufSU":
            return {TYPE_TAG: "npscalar", "dtype": value.dtype.str, "value": value.item()}
        if isinstance(value, bytes):
            return {TYPE_TAG: "bytes", "hex": value.hex()}
        raise UnsafeStateError(f"{where}: a {type(value).__module__}.{type(value).__qualname__} cannot be stored "
                               "without pickle (allowed: None, bool, int, float, str, list, tuple, dict, "
                               "torch.Tensor, numpy arrays and scalars of plain types, bytes)")

    def _encode_dict(self, value: dict, where: str) -> Any:
        if all(isinstance(key, str) for key in value) and TYPE_TAG not in value:
            return {key: self.encode(item, f"{where}.{key}") for key, item in value.items()}
        items = [[self.encode(key, f"{where}<key {key!r}>"), self.encode(item, f"{where}[{key!r}]")]
                 for key, item in value.items()]
        return {TYPE_TAG: "dict", "items": items}

    def _encode_ndarray(self, value: np.ndarray, where: str) -> Any:
        if value.dtype.kind == "O":
            items = [self.encode(item, f"{where}[{i}]") for i, item in enumerate(value.reshape(-1))]
            return {TYPE_TAG: "objarray", "shape": list(value.shape), "items": items}
        if value.dtype.kind not in _RAW_ARRAY_KINDS:
            raise UnsafeStateError(f"{where}: a numpy array of dtype {value.dtype} cannot be stored without pickle")
        raw = torch.frombuffer(bytearray(np.ascontiguousarray(value).tobytes()), dtype=torch.uint8)
        return {TYPE_TAG: "ndarray", "name": self._add_tensor(raw), "dtype": value.dtype.str,
                "shape": list(value.shape)}


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_decode(item, tensors) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get(TYPE_TAG)
    if kind is None:
        return {key: _decode(item, tensors) for key, item in node.items()}
    if kind == "tuple":
        return tuple(_decode(item, tensors) for item in node["items"])
    if kind == "dict":
        return {_decode(key, tensors): _decode(item, tensors) for key, item in node["items"]}
    if kind == "tensor":
        return tensors[node["name"]]
    if kind == "ndarray":
        raw = tensors[node["name"]].numpy().tobytes()
        return np.frombuffer(raw, dtype=np.dtype(node["dtype"])).reshape(node["shape"]).copy()
    if kind == "objarray":
        array = np.empty(len(node["items"]), dtype=object)
        for index, item in enumerate(node["items"]):  # one by one: a list element must stay one element
            array[index] = _decode(item, tensors)
        return array.reshape(node["shape"])
    if kind == "npscalar":
        return np.dtype(node["dtype"]).type(node["value"])
    if kind == "bytes":
        return bytes.fromhex(node["hex"])
    raise ValueError(f"unknown {TYPE_TAG} {kind!r}")


def encode_state(state: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """``(json_tree, tensors)`` of ``state``; raises :class:`UnsafeStateError` for what needs pickle."""
    encoder = _Encoder()
    tree = encoder.encode(state, "state")
    return tree, encoder.tensors


def decode_state(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`encode_state`."""
    return _decode(tree, tensors)


def save_state(state: Any, prefix: str) -> None:
    """Write ``{prefix}.safetensors`` then ``{prefix}.json`` (each atomically)."""
    tree, tensors = encode_state(state)
    with replacing_file(prefix + TENSORS_SUFFIX) as tmp:
        save_file(tensors, tmp)
    atomic_write_text(prefix + JSON_SUFFIX, json.dumps({"format": FORMAT, "state": tree}))


def load_state(prefix: str) -> Any:
    """Read what :func:`save_state` wrote (JSON + safetensors only; no pickle)."""
    with open(prefix + JSON_SUFFIX, encoding="utf-8") as fp:
        document = json.load(fp)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{prefix}{JSON_SUFFIX} is not a hybridrl state file (no format {FORMAT})")
    tensors = load_file(prefix + TENSORS_SUFFIX, device="cpu")
    return decode_state(document["state"], tensors)


def state_exists(prefix: str) -> bool:
    """True if both files of the pair exist."""
    return os.path.exists(prefix + JSON_SUFFIX) and os.path.exists(prefix + TENSORS_SUFFIX)


def save_single_file(state: Any, path: str, kind: str) -> None:
    """Write ``state`` as one safetensors file; the JSON structure goes in the header metadata under ``kind``."""
    tree, tensors = encode_state(state)
    save_file(tensors, path, metadata={"format": FORMAT, kind: json.dumps(tree)})


def load_single_file(path: str, kind: str) -> Any:
    """Read what :func:`save_single_file` wrote; ValueError if ``path`` is not such a file of ``kind``."""
    try:
        with safe_open(path, framework="pt", device="cpu") as reader:
            metadata = reader.metadata() or {}
            tensors = {name: reader.get_tensor(name) for name in reader.keys()}
    except Exception as error:  # noqa: BLE001 - safetensors reports a wrong header in several ways
        raise ValueError(f"{path} is not a safetensors file ({type(error).__name__}: {error})") from error
    if metadata.get("format") != FORMAT or kind not in metadata:
        raise ValueError(f"{path} is a safetensors file but not a hybridrl {kind} (its metadata lacks {kind!r})")
    return decode_state(json.loads(metadata[kind]), tensors)
