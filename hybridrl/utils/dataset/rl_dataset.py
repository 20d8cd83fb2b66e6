"""RL prompt dataset (verl 0.5 ``RLHFDataset``): parquet rows → left-padded prompt tensors.

One parquet row per prompt, verl's schema: ``data_source``, ``prompt`` (chat messages), ``ability``,
``reward_model {style, ground_truth}``, ``extra_info {split, index, ...}``. Each item is::

    input_ids, attention_mask, position_ids   LongTensor [P]   left-padded to P = data.max_prompt_length
    raw_prompt_ids                            list[int]        the unpadded (truncated) prompt tokens
    raw_prompt / full_prompts / raw_input_ids optional         data.return_raw_chat / return_full_prompt / return_raw_input_ids
    index, tools_kwargs, interaction_kwargs                    from extra_info
    + every other column of the row (data_source, reward_model, extra_info, ability, ...)

:func:`collate_fn` stacks tensors and turns everything else into numpy object arrays, the layout of
``DataProto.from_single_dict``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset, RandomSampler, Sampler, SequentialSampler

from hybridrl.utils import torch_functional as verl_F
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.dataset.parquet_io import check_chat_column, normalize_data_files, read_parquet_rows
from hybridrl.utils.dataset.sampler import AbstractSampler

if TYPE_CHECKING:
    from omegaconf import DictConfig

logger = logging.getLogger(__name__)

_TRUNCATIONS = ("error", "left", "right", "middle")


def collate_fn(data_list: list[dict]) -> dict:
    """Batch items: tensors → stacked ``[B, ...]``; everything else → ``np.ndarray(dtype=object)`` of length B."""
    tensors: dict[str, list] = defaultdict(list)
    non_tensors: dict[str, list] = defaultdict(list)
    for item in data_list:
        for key, value in item.items():
            (tensors if isinstance(value, torch.Tensor) else non_tensors)[key].append(value)
    batch: dict[str, Any] = {key: torch.stack(values, dim=0) for key, values in tensors.items()}
    for key, values in non_tensors.items():
        array = np.empty(len(values), dtype=object)
        array[:] = values  # element-wise, so lists stay lists instead of becoming a 2-D array
        batch[key] = array
    return batch


def _truncate_ids(ids: list[int], max_length: int, truncation: str) -> list[int]:
    if truncation == "left":
        return ids[-max_length:]
    if truncation == "right":
        return ids[:max_length]
    left = max_length // 2
    return ids[:left] + ids[len(ids) - (max_length - left) :]


# ---- overlong-prompt filtering (optionally in worker processes) -------------------------------
_WORKER_STATE: dict[str, Any] = {}


def _init_length_worker(tokenizer: Any, chat_template: str | None) -> None:
    _WORKER_STATE["tokenizer"], _WORKER_STATE["chat_template"] = tokenizer, chat_template


def _prompt_length(messages: list[dict]) -> int:
    tokenizer = _WORKER_STATE["tokenizer"]
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, chat_template=_WORKER_STATE["chat_template"]
    )
    return len(tokenizer.encode(text, add_special_tokens=False))


class RLHFDataset(Dataset):
    """Prompts from parquet files, tokenized with the chat template in ``__getitem__`` (verl 0.5).

    Args:
        data_files: a path or a list of paths (``~`` expanded).
        tokenizer: a Hugging Face tokenizer with a chat template and a pad token.
        config: the ``data`` config section (DictConfig or dict).
        processor: multimodal processor (unused: text-only).
    """

    def __init__(self, data_files: Any, tokenizer: Any, config: DictConfig, processor: Any = None):
        self.data_files = normalize_data_files(data_files)
        config = section_with_defaults(config, "data")
        self.tokenizer, self.processor, self.config = tokenizer, processor, config
        self.prompt_key = config.prompt_key
        self.max_prompt_length = int(config.max_prompt_length)
        self.truncation = config.truncation
        if self.truncation not in _TRUNCATIONS:
            raise ValueError(f"data.truncation={self.truncation!r} must be one of {_TRUNCATIONS}")
        self.return_raw_chat = bool(config.return_raw_chat)
        self.return_raw_input_ids = bool(config.return_raw_input_ids)
        self.return_full_prompt = bool(config.return_full_prompt)
        self.filter_overlong_prompts = bool(config.filter_overlong_prompts)
        workers = int(config.filter_overlong_prompts_workers)
        self.num_workers = max(1, min(workers, os.cpu_count() or 1))
        self.chat_template = config.get("custom_chat_template", None)
        self.need_tools_kwargs = bool(config.get("need_tools_kwargs", False))
        self._read_files_and_tokenize()

    def _read_files_and_tokenize(self) -> None:
        rows: list[dict] = []
        for path in self.data_files:
            schema, file_rows = read_parquet_rows(path, required_columns=[self.prompt_key])
            if not file_rows:  # before the type check: an empty frame from pandas has a column of type null
                raise ValueError(
                    f"{path} has no rows (0 prompts in column data.prompt_key={self.prompt_key!r}); regenerate it "
                    "(examples/data_preprocess/) or remove it from data.train_files / data.val_files."
                )
            check_chat_column(schema, path, self.prompt_key)
            rows.extend(file_rows)
        self.dataframe = rows
        logger.info("dataset len: %d (from %d file(s))", len(rows), len(self.data_files))
        if self.filter_overlong_prompts:
            self._filter_overlong()

    def _filter_overlong(self) -> None:
        messages = [row[self.prompt_key] for row in self.dataframe]
        if self.num_workers > 1:
            # forkserver, not fork: this runs in processes with live threads (the TaskRunner's Ray threads, a driver
            # with Ray up), and a worker forked from them can inherit a held lock or Ray's signal handlers; and
            # close + join instead of the context manager's terminate (SIGTERM to workers that may hold the queue lock)
            ctx = multiprocessing.get_context("forkserver")
            pool = ctx.Pool(self.num_workers, _init_length_worker, (self.tokenizer, self.chat_template))
            try:
                lengths = pool.map(_prompt_length, messages, chunksize=max(1, len(messages) // (4 * self.num_workers)))
            finally:
                pool.close()
                pool.join()
        else:
            _init_length_worker(self.tokenizer, self.chat_template)
            lengths = [_prompt_length(m) for m in messages]
        before = len(self.dataframe)
        self.dataframe = [row for row, n in zip(self.dataframe, lengths) if n <= self.max_prompt_length]
        logger.info(
            "filter dataset len: %d (dropped %d prompts longer than %d tokens)",
            len(self.dataframe),
            before - len(self.dataframe),
            self.max_prompt_length,
        )

    def resume_dataset_state(self) -> None:
        """Re-read the files (verl calls this after loading a checkpoint)."""
        self._read_files_and_tokenize()

    def __len__(self) -> int:
        return len(self.dataframe)

    def _build_messages(self, row: dict) -> list[dict]:
        return row.pop(self.prompt_key)

    def __getitem__(self, item: int) -> dict:
        row = dict(self.dataframe[item])
        messages = self._build_messages(row)
        raw_prompt = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, chat_template=self.chat_template
        )
        encoded = self.tokenizer(raw_prompt, return_tensors="pt", add_special_tokens=False)
        length = encoded["input_ids"].shape[-1]
        if length > self.max_prompt_length and self.truncation == "error":
            raise ValueError(
                f"prompt of row {item} has {length} tokens > data.max_prompt_length={self.max_prompt_length} "
                "with data.truncation=error; raise data.max_prompt_length, set data.truncation=left|right|middle, "
                "or data.filter_overlong_prompts=True"
            )
        input_ids, attention_mask = verl_F.postprocess_data(
            encoded["input_ids"],
            encoded["attention_mask"],
            max_length=self.max_prompt_length,
            pad_token_id=self.tokenizer.pad_token_id,
            left_pad=True,
            truncation=self.truncation,
        )
        row["input_ids"], row["attention_mask"] = input_ids[0], attention_mask[0]
        row["position_ids"] = verl_F.compute_position_id_with_mask(attention_mask)[0]
        raw_prompt_ids = self.tokenizer.encode(raw_prompt, add_special_tokens=False)
        if len(raw_prompt_ids) > self.max_prompt_length:
            raw_prompt_ids = _truncate_ids(raw_prompt_ids, self.max_prompt_length, self.truncation)
        row["raw_prompt_ids"] = raw_prompt_ids
        if self.return_raw_input_ids:
            row["raw_input_ids"] = list(raw_prompt_ids)
        if self.return_raw_chat:
            row["raw_prompt"] = messages
        if self.return_full_prompt:
            row["full_prompts"] = raw_prompt
        extra_info = row.get("extra_info") or {}
        row["index"] = extra_info.get("index", 0)
        row["tools_kwargs"] = extra_info.get("tools_kwargs") or {}
        row["interaction_kwargs"] = extra_info.get("interaction_kwargs") or {}
        if extra_info.get("need_tools_kwargs", self.need_tools_kwargs) and not row["tools_kwargs"]:
            logger.warning("tools_kwargs is empty for index %s, data source: %s", row["index"], row.get("data_source"))
        return row


def create_rl_sampler(data_config: DictConfig, dataset: Dataset) -> Sampler:
    """The train sampler: a custom sampler class, ``RandomSampler`` seeded by ``data.seed`` (default 1)
    when ``data.shuffle``, else ``SequentialSampler``."""
    data_config = section_with_defaults(data_config, "data")
    sampler_cfg = data_config.sampler
    if sampler_cfg is not None and sampler_cfg.get("class_path", None):
        return _custom_sampler(data_config, sampler_cfg, dataset)
    if data_config.shuffle:
        generator = torch.Generator()
        generator.manual_seed(int(data_config.seed))
        return RandomSampler(data_source=dataset, generator=generator)
    return SequentialSampler(data_source=dataset)


def _custom_sampler(data_config: DictConfig, sampler_cfg: DictConfig, dataset: Dataset) -> Sampler:
    """``data.sampler.class_name`` from ``data.sampler.class_path``, built on ``dataset``.

    The checks raise AssertionError, as verl's asserts do (kept under ``python -O``).
    """
    from hybridrl.utils.import_utils import load_extern_type

    cls = load_extern_type(sampler_cfg["class_path"], sampler_cfg["class_name"], key="data.sampler.class_path")
    sampler = cls(data_source=dataset, data_config=data_config)
    if not isinstance(sampler, AbstractSampler):
        raise AssertionError(
            f"data.sampler.class_name={sampler_cfg['class_name']!r} must subclass "
            "hybridrl.experimental.dataset.sampler.AbstractSampler (or AbstractCurriculumSampler)"
        )
    if data_config.dataloader_num_workers != 0:
        raise AssertionError(
            "a custom data.sampler needs data.dataloader_num_workers=0: loader workers would prefetch "
            "indices before the curriculum sampler can reorder them"
        )
    return sampler


def get_dataset_class(data_config: DictConfig) -> type:
    """``data.custom_cls.{path,name}`` if set (must subclass torch ``Dataset``), else :class:`RLHFDataset`."""
    custom = data_config.get("custom_cls", None)
    if custom is None or not custom.get("path", None):
        return RLHFDataset
    from hybridrl.utils.import_utils import load_extern_type

    cls = load_extern_type(custom["path"], custom.get("name"), key="data.custom_cls.path")
    if not (isinstance(cls, type) and issubclass(cls, Dataset)):
        raise TypeError(
            f"data.custom_cls.name={custom.get('name')!r} in {custom['path']} must be a torch.utils.data.Dataset subclass"
        )
    return cls


def create_rl_dataset(
    data_paths: Any, data_config: DictConfig, tokenizer: Any, processor: Any = None, is_train: bool = True
) -> Dataset:
    """Build the (custom or default) dataset class with verl's constructor signature.

    ``is_train`` is accepted for verl's signature; verl uses it to pick its experimental ``data.datagen``
    dataset for training, which hybridrl does not have.
    """
    cls = get_dataset_class(data_config)
    return cls(data_files=data_paths, tokenizer=tokenizer, processor=processor, config=data_config)
