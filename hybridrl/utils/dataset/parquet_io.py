"""Reading verl-schema parquet files with errors that name the file, the column and the fix."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def normalize_data_files(data_files: Any) -> list[str]:
    """``str`` or a list/ListConfig of paths → a list of absolute paths with ``~`` expanded."""
    if isinstance(data_files, (str, os.PathLike)):
        data_files = [data_files]
    if not isinstance(data_files, Sequence) and not hasattr(data_files, "__iter__"):
        raise TypeError(f"data files must be a path or a list of paths, got {type(data_files).__name__}")
    files = [os.path.abspath(os.path.expanduser(str(f))) for f in data_files]
    if not files:
        raise ValueError("no data files given (data.train_files / data.val_files is empty)")
    return files


def read_parquet_rows(path: str, required_columns: Sequence[str] = ()) -> tuple[pa.Schema, list[dict]]:
    """Read one parquet file into a list of row dicts (nested structs/lists become dicts/lists).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not readable parquet, or a required column is missing.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path} (check data.train_files / data.val_files)")
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise ValueError(f"cannot read {path} as parquet ({type(exc).__name__}: {exc})") from exc
    missing = [c for c in required_columns if c not in table.column_names]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing}; the file has columns {table.column_names}. "
            "Point data.prompt_key (or the SFT keys) at an existing column or regenerate the file."
        )
    return table.schema, table.to_pylist()


def check_chat_column(schema: pa.Schema, path: str, column: str) -> None:
    """Require ``column`` to be a list of ``{role, content}`` structs (chat messages)."""
    arrow_type = schema.field(column).type
    ok = (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and pa.types.is_struct(
        arrow_type.value_type
    )
    if ok:
        names = {arrow_type.value_type.field(i).name for i in range(arrow_type.value_type.num_fields)}
        ok = {"role", "content"} <= names
    if not ok:
        raise ValueError(
            f"{path}: column {column!r} has type {arrow_type}, expected a list of chat messages "
            f"[{{'role': ..., 'content': ...}}] (see examples/data_preprocess/gsm8k.py for the schema)"
        )
