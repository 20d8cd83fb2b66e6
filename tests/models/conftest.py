"""Fixtures of the model tests: the tiny model's tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
