"""Offline generation: ``python -m hybridrl.trainer.main_generation key=value ...`` (verl's generation.yaml).

    data.path (parquet, chat prompts in data.prompt_key)
      ──► chat template (add_generation_prompt, as RLHFDataset) ──► left-padded [B, P] batches of data.batch_size
      ──► repeat each prompt data.n_samples times (interleaved, as verl 0.5)
      ──► rollout engine rollout.name (hf | hf_generate | vllm | sglang) ──► decode valid response tokens
      ──► data.output_path: the input rows + a ``responses`` column (a list of n_samples strings per prompt)

As in verl, generation runs on a rollout-only ``ActorRolloutRefWorker`` group (``trainer.n_gpus_per_node`` x
``trainer.nnodes`` Ray workers; CPU workers with ``trainer.device=cpu``), each generating its share of a batch.
Responses are decoded with special tokens kept (EOS included) and pad tokens removed, as verl does.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig

from hybridrl.config import hydra_entry
from hybridrl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from hybridrl.utils.torch_functional import compute_position_id_with_mask


def _as_messages(chat: Any) -> list[dict]:
    """A parquet chat cell (numpy array of dicts, list, or a plain string) → chat messages."""
    if isinstance(chat, str):
        return [{"role": "user", "content": chat}]
    return [dict(message) for message in list(chat)]


def tokenize_chats(tokenizer: Any, chats: list[Any], prompt_length: int) -> DataProto:
    """Template chats like RLHFDataset, then left-pad to a batch: ``input_ids/attention_mask/position_ids [B, P]``."""
    texts = [
        tokenizer.apply_chat_template(_as_messages(chat), add_generation_prompt=True, tokenize=False) for chat in chats
    ]
    tokenizer.padding_side = "left"
    encoded = tokenizer(
        texts, return_tensors="pt", padding=True, truncation=True, max_length=prompt_length, add_special_tokens=False
    )
    mask = encoded["attention_mask"]
    return DataProto.from_dict(
        {"input_ids": encoded["input_ids"], "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    )


def decode_responses(tokenizer: Any, output: DataProto) -> list[str]:
    """Valid response tokens of each row (up to and including EOS) → text, pad tokens removed."""
    responses = output.batch["responses"]
    valid = output.batch["attention_mask"][:, -responses.shape[1] :].sum(-1).tolist()
    texts = [
        tokenizer.decode(row[:length].tolist(), skip_special_tokens=False) for row, length in zip(responses, valid)
    ]
    pad = tokenizer.pad_token
    return [text.replace(pad, "") for text in texts] if pad else texts


def build_rollout_worker_group(config: DictConfig):
    """verl's layout: a rollout-only ``ActorRolloutRefWorker`` group on ``[n_gpus_per_node] * nnodes`` devices."""
    import ray

    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.utils.ray_utils import init_ray
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    device = config.trainer.device
    init_ray(config.get("ray_init"), device, env_vars={"HYBRIDRL_DEVICE": device, "TOKENIZERS_PARALLELISM": "false"})
    pool = RayResourcePool(
        process_on_nodes=[int(config.trainer.n_gpus_per_node)] * int(config.trainer.nnodes),
        use_gpu=device == "cuda",
        max_colocate_count=1,
    )
    worker_cls = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=config, role="rollout")
    worker_group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=worker_cls, device_name=device)
    worker_group.init_model()
    return worker_group


def generate(config: DictConfig) -> pd.DataFrame:
    """Generate ``data.n_samples`` responses for every prompt of ``data.path``; returns the output frame."""
    from hybridrl.workers.engine import build_tokenizer

    if config.get("trainer", {}).get("device") == "cuda" and not torch.cuda.is_available():
        raise ValueError("trainer.device=cuda but no CUDA device is available: pass trainer.device=cpu")
    if config.model.get("external_lib"):
        import importlib

        importlib.import_module(config.model.external_lib)
    dataset = pd.read_parquet(os.path.expanduser(config.data.path))
    chats = dataset[config.data.prompt_key].tolist()
    tokenizer = build_tokenizer(os.path.expanduser(config.model.path))
    worker_group = build_rollout_worker_group(config)
    n_samples, batch_size = int(config.data.n_samples), int(config.data.batch_size)
    texts: list[str] = []
    for start in range(0, len(chats), batch_size):
        prompts = tokenize_chats(tokenizer, chats[start : start + batch_size], int(config.rollout.prompt_length))
        prompts = prompts.repeat(repeat_times=n_samples, interleave=True)
        prompts.meta_info.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        padded, pad_size = pad_dataproto_to_divisor(prompts, worker_group.world_size)
        output = unpad_dataproto(worker_group.generate_sequences(padded), pad_size=pad_size)
        texts.extend(decode_responses(tokenizer, output))
        print(f"generated {min(start + batch_size, len(chats))}/{len(chats)} prompts", flush=True)
    per_prompt = np.array(texts, dtype=object).reshape(len(chats), n_samples).tolist()
    dataset["responses"] = per_prompt
    return dataset


def run_generation(config: DictConfig) -> str:
    """Generate and write ``data.output_path``; returns the path written."""
    output_path = os.path.expanduser(config.data.output_path)
    dataset = generate(config)
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    dataset.to_parquet(output_path)
    print(f"wrote {len(dataset)} prompts x {config.data.n_samples} responses to {output_path}", flush=True)
    return output_path


# unknown keys are reported by Hydra (struct mode)
main = hydra_entry("generation", run_generation)


if __name__ == "__main__":
    main()
