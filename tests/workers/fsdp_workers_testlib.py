"""Shared helpers for the FSDP worker tests: verl configs for the tiny model and PPO batches."""

from __future__ import annotations

import torch
from config_testlib import compose_config

from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask

PROMPT_LEN, RESPONSE_LEN = 6, 5


def ppo_config(model_dir: str, *extra: str):
    """The real ``configs/ppo_trainer.yaml`` composed for the tiny model (global sizes as a user writes them)."""
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "data.train_batch_size=4",
        f"critic.model.path={model_dir}",
        "critic.model.enable_gradient_checkpointing=False",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "critic.optim.lr=1e-3",
        f"reward_model.model.path={model_dir}",
        "reward_model.micro_batch_size_per_gpu=2",
        *extra,
    ]
    return compose_config("ppo_trainer", overrides)


def ppo_batch(batch_size: int = 4, seed: int = 0) -> DataProto:
    """Left-padded prompts [B, 6] + right-padded responses [B, 5] with every key the actor/critic read."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 500, (batch_size, PROMPT_LEN + RESPONSE_LEN), generator=gen)
    attention_mask = torch.zeros_like(input_ids)
    for row in range(batch_size):
        attention_mask[row, row % 3 : PROMPT_LEN + RESPONSE_LEN - (row % 4)] = 1
    response_mask = attention_mask[:, PROMPT_LEN:]
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "prompts": input_ids[:, :PROMPT_LEN],
        "responses": input_ids[:, PROMPT_LEN:],
        "response_mask": response_mask,
        "advantages": torch.randn(batch_size, RESPONSE_LEN, generator=gen) * response_mask,
        "old_log_probs": torch.zeros(batch_size, RESPONSE_LEN),
        "values": torch.zeros(batch_size, RESPONSE_LEN),
        "returns": torch.ones(batch_size, RESPONSE_LEN) * response_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def hf_response_log_probs(model_dir: str, batch) -> torch.Tensor:
    """Reference log-probs of the responses from a plain HF forward of the saved weights: [B, R]."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[:, -RESPONSE_LEN - 1 : -1]
    return torch.log_softmax(logits, dim=-1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
