"""Fixtures for the actor tests: a tiny causal LM and PPO batches with left/right padding."""

from __future__ import annotations

import pytest
import torch
from config_testlib import compose_section

from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask

PROMPT_LEN, RESPONSE_LEN = 6, 5


def make_ppo_batch(batch_size: int = 4, vocab: int = 500, seed: int = 0, full_responses: bool = False) -> DataProto:
    """Left-padded prompts [B, 6] + right-padded responses [B, 5], with the PPO keys the actor reads.

    Rows have different prompt and response lengths (unless ``full_responses``), so padding,
    packing and token-budget micro-batching all matter.
    """
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch_size, PROMPT_LEN + RESPONSE_LEN), generator=gen)
    prompt_lens = [PROMPT_LEN - (i % 3) for i in range(batch_size)]  # 6, 5, 4, 6, ...
    response_lens = [RESPONSE_LEN if full_responses else RESPONSE_LEN - (i % 4) for i in range(batch_size)]
    attention_mask = torch.zeros_like(input_ids)
    for row, (p_len, r_len) in enumerate(zip(prompt_lens, response_lens)):
        attention_mask[row, PROMPT_LEN - p_len : PROMPT_LEN + r_len] = 1
    input_ids = torch.where(attention_mask.bool(), input_ids, torch.zeros_like(input_ids))
    return ppo_batch_from(input_ids, attention_mask, PROMPT_LEN, gen)


def ppo_batch_from(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                   gen: torch.Generator) -> DataProto:
    """The PPO keys the actor reads, around ``input_ids, attention_mask [B, P+R]`` (prompt = the first ``prompt_len``
    columns): positions from the mask, random advantages on response tokens, zero old/ref log-probs."""
    batch_size, response_len = input_ids.shape[0], input_ids.shape[1] - prompt_len
    response_mask = attention_mask[:, prompt_len:]
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "responses": input_ids[:, prompt_len:],
        "response_mask": response_mask,
        "advantages": torch.randn(batch_size, response_len, generator=gen) * response_mask,
        "old_log_probs": torch.zeros(batch_size, response_len),
        "ref_log_prob": torch.zeros(batch_size, response_len),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def actor_config(use_remove_padding: bool = False, enable_activation_offload: bool = False, **overrides):
    """The shipped ``actor_rollout_ref.actor`` section with per-rank sizes (4 samples per mini-batch and micro-batch).

    ``use_remove_padding`` / ``enable_activation_offload`` are ``actor_rollout_ref.model`` switches that verl's
    worker copies into the actor section (where ``DataParallelPPOActor`` reads them).
    """
    section = compose_section(
        "actor_rollout_ref.actor", **{"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 4, **overrides}
    )
    section.use_remove_padding = use_remove_padding
    section.enable_activation_offload = enable_activation_offload
    return section


@pytest.fixture(scope="module")
def causal_lm(tiny_model_dir):
    """The tiny Qwen2 causal LM in fp32 (sdpa attention), shared by a module's tests (copy before training)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


@pytest.fixture
def make_batch():
    """Factory fixture: :func:`make_ppo_batch`."""
    return make_ppo_batch


@pytest.fixture
def make_actor_config():
    """Factory fixture: :func:`actor_config`."""
    return actor_config
