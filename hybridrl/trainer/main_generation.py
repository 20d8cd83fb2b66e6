"""Offline generation: ``python -m hybridrl.trainer.main_generation key=value ...`` (verl's generation.yaml).

    data.path (parquet, chat prompts in data.prompt_key)
      ──► chat template (add_generation_prompt, as RLHFDataset) ──► left-padded [B, P] batches of data.batch_size
      ──► repeat each prompt data.n_samples times (interleaved, as verl 0.5)
      ──► rollout engine rollout.name (hf | hf_generate | vllm | sglang) ──► decode valid response tokens
      ──► data.output_path: the input rows + a ``responses`` column (a list of n_samples strings per prompt)

Deviation from verl: generation runs in this process on one rollout engine that loads ``model.path``
itself (no Ray worker group); ``trainer.n_gpus_per_node`` / ``nnodes`` are not used. Responses are
decoded with special tokens kept (EOS included) and pad tokens removed, as verl does.
"""

from __future__ import annotations

import os
from typing import Any

import hydra
import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig

from hybridrl.protocol import DataProto
from hybridrl.utils.config.paths import config_dir
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


def build_engine(config: DictConfig, tokenizer: Any):
    """A standalone rollout handle (the engine loads ``model.path`` and never syncs)."""
    from hybridrl.workers.engine import load_hf_config
    from hybridrl.workers.rollout import build_rollout_handle

    hf_config = load_hf_config(os.path.expanduser(config.model.path))
    device = config.trainer.get("device", "cuda")
    return build_rollout_handle(
        config.rollout, config.model, tokenizer=tokenizer, hf_config=hf_config, actor_module=None, device_name=device
    )


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
    handle = build_engine(config, tokenizer)
    n_samples, batch_size = int(config.data.n_samples), int(config.data.batch_size)
    texts: list[str] = []
    for start in range(0, len(chats), batch_size):
        prompts = tokenize_chats(tokenizer, chats[start : start + batch_size], int(config.rollout.prompt_length))
        prompts = prompts.repeat(repeat_times=n_samples, interleave=True)
        prompts.meta_info.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        output = handle.generate_sequences(prompts)
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


@hydra.main(config_path=str(config_dir()), config_name="generation", version_base=None)
def main(config: DictConfig) -> None:
    run_generation(config)


if __name__ == "__main__":
    main()
