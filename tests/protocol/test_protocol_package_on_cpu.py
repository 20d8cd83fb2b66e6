"""The shape of the ``hybridrl.protocol`` package: what it exports, how its modules depend on each
other (one direction, no cycles, no imports hidden in functions) and the batch-key table."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

import hybridrl.protocol as protocol
from hybridrl.protocol import DataProto
from hybridrl.protocol.keys import BATCH_KEYS, Part, Stage, keys_added_by, missing_key_hint

PACKAGE_DIR = Path(protocol.__file__).parent

# Every name verl 0.5's verl/protocol.py defines at module level (its own functions and classes).
VERL_PROTOCOL_NAMES = [
    "DataProto",
    "DataProtoConfig",
    "DataProtoFuture",
    "DataProtoItem",
    "_padding_size_key",
    "all_gather_data_proto",
    "collate_fn",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "pad_dataproto_to_divisor",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
    "unpad_dataproto",
]
# Names hybridrl.protocol (the single module it replaced) offered on top of those.
HYBRIDRL_HELPER_NAMES = [
    "Index",
    "as_key_list",
    "check_rows",
    "chunk_sizes",
    "common_batch_size",
    "deserialize_tensordict",
    "merge_meta_info",
    "normalize_row_index",
    "require",
    "require_batch",
    "serialize_tensordict",
    "tensor_items",
    "tile_rows",
    "unfold_or_repeat_rows",
]


@pytest.mark.parametrize("name", VERL_PROTOCOL_NAMES + HYBRIDRL_HELPER_NAMES)
def test_name_importable_from_hybridrl_protocol(name: str) -> None:
    exec(f"from hybridrl.protocol import {name}", {})


def test_star_import_gives_the_public_api() -> None:
    assert set(protocol.__all__) <= set(dir(protocol))
    assert {"DataProto", "DataProtoFuture", "pad_dataproto_to_divisor", "union_tensor_dict"} <= set(protocol.__all__)


def test_padding_key_matches_the_single_controller() -> None:
    from hybridrl.single_controller.base.dispatch_fns import PADDING_SIZE_KEY

    assert protocol._padding_size_key == PADDING_SIZE_KEY


# ---------------------------------------------------------------------------- module dependencies


def _protocol_imports(tree: ast.Module) -> tuple[set[str], list[int]]:
    """(hybridrl.protocol.* modules imported at module level, line numbers of hybridrl imports in functions)."""
    top_level: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hybridrl.protocol"):
            names = [alias.name for alias in node.names]
            top_level |= {f"{node.module}.{n}" for n in names} if node.module == "hybridrl.protocol" else {node.module}  # type: ignore[operator]
    nested = [
        node.lineno
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(func)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hybridrl")
    ]
    return top_level, nested


def _module_graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue
        deps, nested = _protocol_imports(ast.parse(path.read_text()))
        assert not nested, f"{path.name}: hybridrl imports inside functions at lines {nested}"
        graph[f"hybridrl.protocol.{path.stem}"] = deps
    return graph


def test_package_modules_form_a_dag_with_the_class_in_the_middle() -> None:
    graph = _module_graph()
    order: list[str] = []
    while len(order) < len(graph):
        ready = sorted(m for m, deps in graph.items() if m not in order and deps <= set(order))
        assert ready, f"import cycle among {sorted(set(graph) - set(order))}"
        order.extend(ready)
    leaves = {"keys", "checks", "rows", "merge", "auto_padding", "serialization"}
    for leaf in leaves:
        assert "hybridrl.protocol.data_proto" not in graph[f"hybridrl.protocol.{leaf}"], leaf
    for user in ("padding", "folding", "futures"):
        assert "hybridrl.protocol.data_proto" in graph[f"hybridrl.protocol.{user}"], user


def test_every_module_imports_on_its_own() -> None:
    for path in PACKAGE_DIR.glob("*.py"):
        if path.name != "__init__.py":
            importlib.import_module(f"hybridrl.protocol.{path.stem}")


# ---------------------------------------------------------------------------- the batch-key table


def test_key_table_matches_the_step_order() -> None:
    stages = [key.stage for key in BATCH_KEYS]
    assert stages == sorted(stages, key=list(Stage).index), "rows are ordered by stage"
    assert [k.name for k in keys_added_by(Stage.ADVANTAGE)] == ["token_level_rewards", "advantages", "returns"]
    # the per-token keys of the training stages are all [B, R].
    per_token = [k for k in BATCH_KEYS if k.stage not in (Stage.DATASET, Stage.GENERATE) and k.part is Part.BATCH]
    assert {k.shape for k in per_token} == {"[B, R]"}


def test_missing_key_error_names_the_stage_that_adds_it() -> None:
    data = DataProto.from_dict(tensors={"responses": torch.zeros(2, 3)})
    with pytest.raises(AssertionError, match=r"'old_log_probs' \[B, R\] is added by the actor in the old_log_prob"):
        data.select(batch_keys=["responses", "old_log_probs"])
    assert missing_key_hint("not_a_canonical_key") == ""


def test_a_step_batch_built_from_the_table_is_consistent() -> None:
    """Tensors of the shapes in the table (B=2, P=3, R=4) make one valid DataProto after generation."""
    sizes = {"[B, P]": (2, 3), "[B, R]": (2, 4), "[B, P+R]": (2, 7)}
    final = {k.name: k for k in BATCH_KEYS if k.part is Part.BATCH}  # last row per name wins (after generation)
    tensors = {name: torch.zeros(sizes[key.shape]) for name, key in final.items()}
    data = DataProto.from_dict(tensors=tensors)
    assert len(data) == 2 and data.batch["input_ids"].shape == (2, 7)  # type: ignore[index]
