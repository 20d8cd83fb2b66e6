"""Preflight of the prompt datasets: every file has rows, every column's pages read, and (``data.truncation=error``)
every prompt fits.

Without it an empty file surfaced after Ray started as torch's ``num_samples=0`` (schema kept) or as a
misleading "column 'prompt' has type null" (an empty frame written by pandas), a corrupt data page behind an
intact footer as a raw pyarrow traceback without the file's name, and an over-long prompt only when its batch was
drawn, possibly mid-epoch. Row counts come from the parquet footer; every column is then read once, one column at
a time (the dataset reads the whole file after Ray anyway); the length check renders the chat template and tokenizes in one batch (the
tokenizer of ``data.tokenizer``, else of the actor model, as the trainer loads it). A ``data.custom_cls``
dataset has a format of its own: only the row count is checked then.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig

from hybridrl.config.access import MODEL, get
from hybridrl.config.errors import ConfigProblem

__all__ = ["check_datasets", "over_long_prompts"]

DATA_KEYS = ("data.train_files", "data.val_files")
TRUNCATION_FIX = (
    "raise data.max_prompt_length to at least {longest}, set data.truncation=left|right|middle, "
    "or data.filter_overlong_prompts=True to drop them."
)


def check_datasets(config: DictConfig) -> list[ConfigProblem]:
    """Problems of the parquet files of ``data.train_files`` and ``data.val_files`` (missing files are reported by
    the config validation, not here)."""
    problems: list[ConfigProblem] = []
    check_lengths = (
        get(config, "data.truncation") == "error"
        and not get(config, "data.filter_overlong_prompts")
        and not get(config, "data.custom_cls.path")
    )
    tokenizer = None
    for key in DATA_KEYS:
        for path in _files(get(config, key)):
            problem = _row_count_problem(key, path, get(config, "data.prompt_key")) or _unreadable_column(key, path)
            if problem is not None:
                problems.append(problem)
                continue
            if check_lengths:
                tokenizer = tokenizer or _load_tokenizer(config)
                problems += _length_problems(config, key, path, tokenizer)
    return problems


def _files(value: Any) -> list[str]:
    if value is None:
        return []
    paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    files = [os.path.abspath(os.path.expanduser(str(path))) for path in paths]
    return [path for path in files if os.path.isfile(path)]


def _row_count_problem(key: str, path: str, prompt_key: str) -> ConfigProblem | None:
    import pyarrow.parquet as pq

    try:
        num_rows = pq.ParquetFile(path).metadata.num_rows
    except Exception as error:  # noqa: BLE001  (pyarrow raises several types for a bad file)
        return ConfigProblem(key, f"cannot read {path} as parquet ({type(error).__name__}: {error}).",
                             "point it at a parquet file in verl's schema (see examples/data_preprocess/).")
    if num_rows > 0:
        return None
    return ConfigProblem(
        key, f"{path} has no rows (0 prompts in column data.prompt_key={prompt_key!r}).",
        "regenerate the file (examples/data_preprocess/) or point the key at a non-empty parquet file.",
    )


def _unreadable_column(key: str, path: str) -> ConfigProblem | None:
    """The first column of ``path`` whose pages cannot be decoded (a corrupt page behind an intact footer)."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    for column in parquet.schema_arrow.names:
        try:
            parquet.read(columns=[column])
        except Exception as error:  # noqa: BLE001  (OSError, ArrowInvalid, ... depending on the damage)
            reason = "".join(char for char in " ".join(str(error).split()) if char.isprintable())  # pyarrow's raw bytes
            return ConfigProblem(key, f"cannot read column {column!r} of {path} ({type(error).__name__}: {reason}).",
                                 "the file is corrupt: regenerate it (examples/data_preprocess/) or restore a copy.")
    return None


def _load_tokenizer(config: DictConfig) -> Any:
    from hybridrl.utils.tokenizer import hf_tokenizer

    path = get(config, "data.tokenizer") or get(config, f"{MODEL}.path")
    return hf_tokenizer(os.path.expanduser(str(path)), trust_remote_code=bool(get(config, f"{MODEL}.trust_remote_code")))


def _length_problems(config: DictConfig, key: str, path: str, tokenizer: Any) -> list[ConfigProblem]:
    import pyarrow.parquet as pq

    prompt_key = get(config, "data.prompt_key")
    if prompt_key not in pq.ParquetFile(path).schema_arrow.names:
        return [ConfigProblem("data.prompt_key", f"{path} has no column {prompt_key!r}.",
                              "set data.prompt_key to the column holding the chat messages.")]
    prompts = pq.read_table(path, columns=[prompt_key]).column(prompt_key).to_pylist()  # read once already
    limit = int(get(config, "data.max_prompt_length"))
    too_long = over_long_prompts(prompts, tokenizer, limit, get(config, "data.custom_chat_template"))
    if not too_long:
        return []
    row, length = too_long[0]
    longest = max(n for _, n in too_long)
    return [ConfigProblem(
        key,
        f"row {row} of {path} has a prompt of {length} tokens > data.max_prompt_length={limit} with "
        f"data.truncation=error ({len(too_long)} of {len(prompts)} prompts are too long; the longest has {longest}).",
        TRUNCATION_FIX.format(longest=longest),
    )]


def over_long_prompts(
    prompts: list[Any], tokenizer: Any, max_length: int, chat_template: str | None = None
) -> list[tuple[int, int]]:
    """``[(row, tokens)]`` of the chat prompts whose rendered, tokenized length exceeds ``max_length``.

    The length is the dataset's: the chat template with the generation prompt, tokenized without special tokens.
    """
    texts = [
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, chat_template=chat_template)
        for messages in prompts
    ]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
    return [(row, n) for row, n in enumerate(lengths) if n > max_length]
