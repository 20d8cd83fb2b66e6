"""Helpers for the vision-language tests: a batch of the shapes task's prompts through ``RLHFDataset``."""

from __future__ import annotations

import importlib.util
import os

import pyarrow as pa
import pyarrow.parquet as pq

from hybridrl.protocol import DataProto
from hybridrl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer

SHAPES_SCRIPT = os.path.join(os.path.dirname(__file__), "..", "examples", "data_preprocess", "shapes.py")
MAX_PROMPT_LENGTH = 64


def shapes_rows(count: int, seed: int = 0) -> list[dict]:
    """``count`` rows of the shapes task (one 56×56 image each)."""
    spec = importlib.util.spec_from_file_location("preprocess_shapes", SHAPES_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate(train_size=count, test_size=0, seed=seed)["train"]


def vlm_prompts(tmp_path, model_dir: str, rows: list[dict], **data_config) -> DataProto:
    """The dataset's collated batch of ``rows`` as the trainer hands it to the rollout: left-padded
    ``input_ids/attention_mask [B, P]``, ``position_ids [B, 3, P]`` (Qwen-VL mrope) or ``[B, P]`` (Idefics3),
    ``multi_modal_data`` / ``multi_modal_inputs`` (``data_config``: more ``data.*`` settings)."""
    path = str(tmp_path / "shapes.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    dataset = RLHFDataset(path, hf_tokenizer(model_dir), {"max_prompt_length": MAX_PROMPT_LENGTH, **data_config},
                          hf_processor(model_dir))
    batch = collate_fn([dataset[i] for i in range(len(rows))])
    tensors = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    non_tensors = {k: batch[k] for k in ("multi_modal_data", "multi_modal_inputs")}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
