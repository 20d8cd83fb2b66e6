"""Fixtures of the rollout tests: the tiny model's tokenizer and a plain fp32 actor model."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture()
def actor(tiny_model_dir):
    """A plain fp32 HF model standing in for the (unsharded) actor module."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
