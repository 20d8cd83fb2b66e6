"""Single-turn SFT dataset (verl 0.5 ``SFTDataset``): prompt/response pairs → right-padded sequences.

Per item (T = ``data.max_length``)::

    input_ids, attention_mask, position_ids   [T]  = chat(prompt, add_generation_prompt) + response + eos, right-padded
    loss_mask                                 [T]  1 at positions t whose NEXT token t+1 is a response token

``loss_mask`` follows verl: positions ``[0, prompt_len - 1)`` and ``prompt_len + response_len - 1`` are
zeroed, so the trainer uses ``loss_mask[:, :-1]`` against the shifted labels ``input_ids[:, 1:]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import Dataset

from hybridrl.utils import torch_functional as verl_F
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.dataset.parquet_io import normalize_data_files, read_parquet_rows

if TYPE_CHECKING:
    from omegaconf import DictConfig


def _dig(value: Any, keys: list[str], path: str, column: str) -> Any:
    """Follow ``keys`` into nested dicts (``data.prompt_dict_keys`` / ``response_dict_keys``)."""
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"{path}: column {column!r} has no nested key {key!r} (from data.*_dict_keys {keys})")
        value = value[key]
    return value


def pad_or_truncate_right(ids: torch.Tensor, mask: torch.Tensor, max_length: int, pad_id: int, truncation: str):
    """Right-pad ``[L]`` to ``[max_length]``, or truncate (``left`` keeps the tail, ``right`` the head, ``error`` raises)."""
    length = ids.shape[0]
    if length < max_length:
        pad = max_length - length
        return torch.cat([ids, ids.new_full((pad,), pad_id)]), torch.cat([mask, mask.new_zeros(pad)])
    if length > max_length:
        if truncation == "left":
            return ids[-max_length:], mask[-max_length:]
        if truncation == "right":
            return ids[:max_length], mask[:max_length]
        raise ValueError(
            f"sequence of {length} tokens > data.max_length={max_length} with data.truncation={truncation!r}; "
            "raise data.max_length or set data.truncation=left|right"
        )
    return ids, mask


class SFTDataset(Dataset):
    """Prompt/response SFT pairs from parquet (``data.prompt_key``, ``data.response_key``, nested dict keys)."""

    def __init__(self, parquet_files: Any, tokenizer: Any, config: DictConfig):
        config = section_with_defaults(config, "data", "sft_trainer")
        self.tokenizer, self.config = tokenizer, config
        self.prompt_key = config.prompt_key
        self.response_key = config.response_key
        self.prompt_dict_keys = list(config.get("prompt_dict_keys", None) or [])
        self.response_dict_keys = list(config.get("response_dict_keys", None) or [])
        self.max_length = int(config.max_length)
        self.truncation = config.truncation
        self.chat_template = config.get("chat_template", None)
        self.prompts: list[str] = []
        self.responses: list[str] = []
        for path in normalize_data_files(parquet_files):
            _, rows = read_parquet_rows(path, required_columns=[self.prompt_key, self.response_key])
            for row in rows:
                self.prompts.append(str(_dig(row[self.prompt_key], self.prompt_dict_keys, path, self.prompt_key)))
                self.responses.append(
                    str(_dig(row[self.response_key], self.response_dict_keys, path, self.response_key))
                )

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        prompt_str = tok.apply_chat_template(
            [{"role": "user", "content": self.prompts[item]}],
            add_generation_prompt=True,
            tokenize=False,
            chat_template=self.chat_template,
        )
        prompt_ids = tok(prompt_str, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
        response_ids = tok(self.responses[item] + tok.eos_token, return_tensors="pt", add_special_tokens=False)[
            "input_ids"
        ][0]
        prompt_len, response_len = prompt_ids.shape[0], response_ids.shape[0]
        input_ids = torch.cat([prompt_ids, response_ids])
        attention_mask = torch.ones_like(input_ids)
        input_ids, attention_mask = pad_or_truncate_right(
            input_ids, attention_mask, self.max_length, tok.pad_token_id, self.truncation
        )
        loss_mask = attention_mask.clone()
        if prompt_len > 1:
            loss_mask[: min(prompt_len, loss_mask.shape[0]) - 1] = 0
        loss_mask[min(prompt_len + response_len, loss_mask.shape[0]) - 1] = 0
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": verl_F.compute_position_id_with_mask(attention_mask),
            "loss_mask": loss_mask,
        }
