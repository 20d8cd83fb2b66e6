"""What the checks run on: locally built random models, generated SFT data, PPO batches and their sizes.

Nothing is downloaded: models come from ``hybridrl.models.tiny`` (a trained byte-level BPE tokenizer of 512
tokens and a random Qwen2). Sizes depend on the mode: the GPU run uses models large enough for offload and MFU
figures to mean something; the dry run uses the tiny model everywhere so the suite stays short.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

TINY = TinyModelSpec()  # hidden 64, 2 layers: the CI's tiny model
# ~25M parameters: offloading it frees ~0.4 GB (fp32 weights + Adam moments), far above allocator noise
OFFLOAD_MODEL = TinyModelSpec(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
                              num_key_value_heads=8, max_position_embeddings=2048)  # fmt: skip
# 0.40B parameters (16 layers × 25.2M; GQA 12 query / 4 key-value heads of 128): the MFU model; built in 36 s on
# 2 CPU cores, 1.6 GB of fp32 safetensors
MFU_MODEL = TinyModelSpec(hidden_size=1536, intermediate_size=4096, num_hidden_layers=16, num_attention_heads=12,
                          num_key_value_heads=4, max_position_embeddings=2048)  # fmt: skip


@dataclass(frozen=True)
class BatchShape:
    """A PPO batch: ``batch_size`` sequences of ``prompt_length + response_length`` tokens, ``micro_batch`` per pass."""

    batch_size: int
    prompt_length: int
    response_length: int
    micro_batch: int


@dataclass(frozen=True)
class Sizes:
    """Everything a mode changes."""

    offload_model: TinyModelSpec
    mfu_model: TinyModelSpec
    worker_batch: BatchShape
    mfu_batch: BatchShape
    rollout_prompts: int
    matmul_size: int
    sft_steps: int


GPU_SIZES = Sizes(OFFLOAD_MODEL, MFU_MODEL, BatchShape(8, 32, 32, 4), BatchShape(32, 512, 512, 8), 8, 8192, 3)
DRY_RUN_SIZES = Sizes(TINY, TINY, BatchShape(4, 6, 5, 2), BatchShape(4, 8, 8, 2), 4, 256, 2)


def sizes_for(context: dict[str, Any]) -> Sizes:
    return DRY_RUN_SIZES if context["mode"] == "dry-run" else GPU_SIZES


def model_dir(context: dict[str, Any], spec: TinyModelSpec = TINY) -> str:
    """A model folder for ``spec`` under the workdir (built once; later calls reuse it)."""
    name = f"qwen2_h{spec.hidden_size}_l{spec.num_hidden_layers}"
    return str(build_tiny_model(Path(context["workdir"]) / "models" / name, spec))


def parameter_count(model_path: str) -> int:
    """Parameters of the saved model (from its safetensors headers; nothing is loaded)."""
    from safetensors import safe_open

    total = 0
    for shard in Path(model_path).glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as tensors:
            for key in tensors.keys():
                total += _numel(tensors.get_slice(key))
    return total


def _numel(tensor_slice: Any) -> int:
    count = 1
    for dim in tensor_slice.get_shape():
        count *= int(dim)
    return count


def write_sft_data(out_dir: Path, num_train: int = 64, num_val: int = 16, seed: int = 0) -> Path:
    """``train.parquet`` / ``val.parquet``: ``question`` -> ``answer`` two-digit additions (verl's SFT columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(num_train + num_val)]
    rows = [{"question": f"What is {a} + {b}?", "answer": f"The answer is {a + b}."} for a, b in pairs]
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows[:num_train]), out_dir / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[num_train:]), out_dir / "val.parquet")
    return out_dir


def ppo_batch(shape: BatchShape, vocab_size: int, seed: int = 0, ragged: bool = True) -> Any:
    """A DataProto with every key ``update_actor`` reads: ``input_ids [B, P+R]`` (left-padded prompts, right-padded
    responses when ``ragged``; no padding otherwise), masks, positions, ``responses [B, R]``, ``advantages [B, R]``.
    ``old_log_probs`` are zeros: put the actor's own in before an update."""
    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask

    batch, prompt, response = shape.batch_size, shape.prompt_length, shape.response_length
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, prompt + response), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if ragged:  # row r: r % 3 prompt pads on the left, r % 4 response pads on the right
        for row in range(batch):
            attention_mask[row, : row % 3] = 0
            attention_mask[row, prompt + response - row % 4 :] = 0
    response_mask = attention_mask[:, prompt:]
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "prompts": input_ids[:, :prompt],
        "responses": input_ids[:, prompt:],
        "response_mask": response_mask,
        "advantages": torch.randn(batch, response, generator=generator) * response_mask,
        "old_log_probs": torch.zeros(batch, response),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})
