"""Multi-turn SFT dataset: whole conversations, loss on the assistant turns only.

Each row holds ``data.multiturn.messages_key`` (default ``messages``): a list of ``{role, content}``.
The conversation is rendered with the chat template; the tokens of every assistant turn (its content
and end-of-turn tokens, not the ``<|im_start|>assistant`` header) are training targets.

Per item (T = ``data.max_length``): ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask``
``[T]``, right-padded. ``loss_mask`` uses :class:`SFTDataset`'s convention (1 at t when token t+1 is a
target), so the SFT trainer treats both datasets identically (``loss_mask[:, :-1]`` vs labels ``[:, 1:]``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import Dataset

from hybridrl.utils import torch_functional as verl_F
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.dataset.parquet_io import normalize_data_files, read_parquet_rows
from hybridrl.utils.dataset.sft_dataset import pad_or_truncate_right

if TYPE_CHECKING:
    from omegaconf import DictConfig

logger = logging.getLogger(__name__)


class MultiTurnSFTDataset(Dataset):
    """Conversations from parquet; loss on assistant tokens only."""

    def __init__(self, parquet_files: Any, tokenizer: Any, config: DictConfig):
        config = section_with_defaults(config, "data", "sft_trainer")
        self.tokenizer, self.config = tokenizer, config
        multiturn = config.multiturn
        self.messages_key = multiturn.messages_key
        self.max_length = int(config.max_length)
        self.truncation = config.truncation
        self.chat_template = config.get("chat_template", None)
        self.messages: list[list[dict]] = []
        for path in normalize_data_files(parquet_files):
            _, rows = read_parquet_rows(path, required_columns=[self.messages_key])
            for i, row in enumerate(rows):
                conversation = row[self.messages_key]
                if not isinstance(conversation, list) or not all(isinstance(m, dict) for m in conversation):
                    raise ValueError(f"{path}: row {i} column {self.messages_key!r} is not a list of messages")
                self.messages.append([{k: v for k, v in m.items() if v is not None} for m in conversation])

    def __len__(self) -> int:
        return len(self.messages)

    def _encode(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        if not messages:
            return []
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False, chat_template=self.chat_template
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def target_mask(self, messages: list[dict]) -> tuple[list[int], list[int]]:
        """``(token ids, per-token target flags)``: 1 on the tokens of assistant turns."""
        ids = self._encode(messages, add_generation_prompt=False)
        targets = [0] * len(ids)
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            start = len(self._encode(messages[:i], add_generation_prompt=True))
            prefix = self._encode(messages[: i + 1], add_generation_prompt=False)
            if ids[: len(prefix)] != prefix:
                logger.warning("chat template is not prefix-stable at turn %d; its loss mask may be off", i)
            for t in range(start, min(len(prefix), len(ids))):
                targets[t] = 1
        return ids, targets

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        ids, targets = self.target_mask(self.messages[item])
        input_ids = torch.tensor(ids, dtype=torch.long)
        # shift: position t carries the flag of token t + 1 (the token it predicts)
        shifted = torch.tensor(targets[1:] + [0], dtype=torch.long)
        ones = torch.ones_like(input_ids)
        input_ids, attention_mask = pad_or_truncate_right(
            input_ids, ones, self.max_length, self.tokenizer.pad_token_id, self.truncation
        )
        loss_mask, _ = pad_or_truncate_right(shifted, ones, self.max_length, 0, self.truncation)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": verl_F.compute_position_id_with_mask(attention_mask),
            "loss_mask": loss_mask * attention_mask,
        }
