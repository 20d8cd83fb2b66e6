"""RL prompt dataset (verl 0.5 ``RLHFDataset``): parquet rows → left-padded prompt tensors.

One parquet row per prompt, verl's schema: ``data_source``, ``prompt`` (chat messages), ``ability``,
``reward_model {style, ground_truth}``, ``extra_info {split, index, ...}``. Each item is::

    input_ids, attention_mask, position_ids   LongTensor [P]   left-padded to P = data.max_prompt_length
    raw_prompt_ids                            list[int]        the unpadded (truncated) prompt tokens
    raw_prompt / full_prompts / raw_input_ids optional         data.return_raw_chat / return_full_prompt / return_raw_input_ids
    index, tools_kwargs, interaction_kwargs                    from extra_info
    + every other column of the row (data_source, reward_model, extra_info, ability, ...)

With a multimodal ``processor`` (a vision-language model), ``<image>`` placeholders in the prompt take the row's
``data.image_key`` images (:mod:`hybridrl.utils.dataset.vision`); the processor expands each into its vision tokens,
and every item also carries::

    multi_modal_data     {"image": [PIL.Image, ...]}    the decoded images, for the rollout ({} for a text row)
    multi_modal_inputs   {"pixel_values": ..., "image_grid_thw": ...}  the processor's per-image tensors, for
                         training (data.return_multi_modal_inputs; {} for a text row)
    position_ids         LongTensor [3, P] for Qwen2-VL-family processors (mrope: temporal, height, width)

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
from omegaconf import OmegaConf
from torch.utils.data import Dataset, RandomSampler, Sampler, SequentialSampler

from hybridrl.utils import torch_functional as verl_F
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.dataset.parquet_io import check_chat_column, normalize_data_files, read_parquet_rows
from hybridrl.utils.dataset.sampler import AbstractSampler
from hybridrl.utils.dataset.vision import (
    check_media_counts,
    load_image,
    mrope_merge_size,
    mrope_position_ids,
    typed_messages,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig

logger = logging.getLogger(__name__)

_TRUNCATIONS = ("error", "left", "right", "middle")
# processor outputs with one entry per token: the dataset pads its own input_ids / attention_mask
_PER_TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids")


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
        processor: the multimodal processor of a vision-language model (``hf_processor``), or None for text.
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
        self.image_key, self.video_key = config.image_key, config.video_key
        self.return_multi_modal_inputs = bool(config.return_multi_modal_inputs)
        mm_kwargs = config.mm_processor_kwargs
        self.mm_processor_kwargs = OmegaConf.to_container(mm_kwargs) if OmegaConf.is_config(mm_kwargs) else {}
        self._read_files_and_tokenize()

    def _read_files_and_tokenize(self) -> None:
        rows: list[dict] = []
        self.row_sources: list[tuple[str, int]] = []  # (file, row in file) of each row, for error messages
        for path in self.data_files:
            schema, file_rows = read_parquet_rows(path, required_columns=[self.prompt_key])
            if not file_rows:  # before the type check: an empty frame from pandas has a column of type null
                raise ValueError(
                    f"{path} has no rows (0 prompts in column data.prompt_key={self.prompt_key!r}); regenerate it "
                    "(examples/data_preprocess/) or remove it from data.train_files / data.val_files."
                )
            check_chat_column(schema, path, self.prompt_key)
            rows.extend(file_rows)
            self.row_sources.extend((path, index) for index in range(len(file_rows)))
        self.dataframe = rows
        for item, row in enumerate(rows):
            self._check_media(row, self._where(item))
        logger.info("dataset len: %d (from %d file(s))", len(rows), len(self.data_files))
        if self.filter_overlong_prompts:
            self._filter_overlong()

    def _where(self, item: int) -> str:
        path, index = self.row_sources[item]
        return f"row {index} of {path}"

    def _check_media(self, row: dict, where: str) -> None:
        """A row with images needs a processor and one image per ``<image>`` (one video per ``<video>``)."""
        images, videos = row.get(self.image_key) or [], row.get(self.video_key) or []
        if (images or videos) and self.processor is None:
            raise ValueError(
                f"{where} has images/videos (data.image_key={self.image_key!r}, data.video_key={self.video_key!r}) "
                "but there is no multimodal processor: point actor_rollout_ref.model.path at a vision-language "
                "model whose folder holds its processor files"
            )
        if self.processor is not None:
            check_media_counts(row[self.prompt_key], len(images), len(videos), where)

    def _filter_overlong(self) -> None:
        if self.processor is not None:  # vision tokens count: run the processor on each row, in this process
            lengths = [
                self._encode(dict(row), self._where(i))[1]["input_ids"].shape[-1]
                for i, row in enumerate(self.dataframe)
            ]
            self._keep_rows(lengths)
            return
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
        self._keep_rows(lengths)

    def _keep_rows(self, lengths: list[int]) -> None:
        before = len(self.dataframe)
        kept = [i for i, n in enumerate(lengths) if n <= self.max_prompt_length]
        self.dataframe = [self.dataframe[i] for i in kept]
        self.row_sources = [self.row_sources[i] for i in kept]
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

    def _encode(self, row: dict, where: str) -> tuple[list[dict], dict, str, list]:
        """Pop the prompt and media columns of ``row``; template and tokenize (with the processor for images).

        Returns:
            (messages, encoded, raw prompt text, images); ``encoded`` holds ``input_ids`` / ``attention_mask``
            ``[1, L]`` and, for a row with images, the processor's image tensors; messages are typed with a processor.
        """
        images = [load_image(image, where) for image in row.pop(self.image_key, None) or []]
        if row.pop(self.video_key, None):
            raise NotImplementedError(
                f"{where}: videos (data.video_key={self.video_key!r}) are not supported yet; drop the column"
            )
        messages = self._build_messages(row)
        if self.processor is not None:
            messages = typed_messages(messages, images, [])
        template_owner = self.tokenizer if self.processor is None else self.processor
        raw_prompt = template_owner.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, chat_template=self.chat_template
        )
        if images:
            encoded = self.processor(text=[raw_prompt], images=images, return_tensors="pt", **self.mm_processor_kwargs)
        else:
            encoded = self.tokenizer(raw_prompt, return_tensors="pt", add_special_tokens=False)
        return messages, dict(encoded), raw_prompt, images

    def _pad_prompt(self, encoded: dict, item: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-pad (or truncate) to ``data.max_prompt_length``: ``(input_ids, attention_mask, position_ids)``,
        ids and mask ``[P]``, position ids ``[P]`` or ``[3, P]`` (mrope)."""
        length = encoded["input_ids"].shape[-1]
        where = self._where(item)
        if length > self.max_prompt_length and self.truncation == "error":
            raise ValueError(
                f"prompt of {where} has {length} tokens > data.max_prompt_length={self.max_prompt_length} "
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
        input_ids, attention_mask = input_ids[0], attention_mask[0]
        image_token_id = getattr(self.processor, "image_token_id", None)
        if image_token_id is not None and int((encoded["input_ids"] == image_token_id).sum()) != int(
            (input_ids == image_token_id).sum()
        ):
            raise ValueError(
                f"prompt of {where} has {length} tokens > data.max_prompt_length={self.max_prompt_length} and "
                f"data.truncation={self.truncation} would cut its vision tokens; raise data.max_prompt_length or "
                "set data.filter_overlong_prompts=True"
            )
        merge_size = mrope_merge_size(self.processor)
        if merge_size is None:
            return input_ids, attention_mask, verl_F.compute_position_id_with_mask(attention_mask[None])[0]
        grid = encoded.get("image_grid_thw")
        return (
            input_ids,
            attention_mask,
            mrope_position_ids(input_ids, attention_mask, image_token_id, grid, merge_size),
        )

    def __getitem__(self, item: int) -> dict:
        row = dict(self.dataframe[item])
        messages, encoded, raw_prompt, images = self._encode(row, self._where(item))
        row["input_ids"], row["attention_mask"], row["position_ids"] = self._pad_prompt(encoded, item)
        if self.processor is not None:  # every row of a multimodal dataset has both keys, so batches collate
            row["multi_modal_data"] = {"image": images} if images else {}
            if self.return_multi_modal_inputs:
                row["multi_modal_inputs"] = {k: v for k, v in encoded.items() if k not in _PER_TOKEN_KEYS}
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
