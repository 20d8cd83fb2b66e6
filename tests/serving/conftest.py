"""Fixtures of the endpoint tests: the tiny model's tokenizer, plain and with a Qwen2.5-style tools template."""

from __future__ import annotations

from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def tools_tokenizer(tiny_model_dir):
    """The tiny tokenizer with the Qwen2.5-style hermes template (renders ``tools`` and ``tool_calls``)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = (TEMPLATES / "qwen2_5_hermes_tools.jinja").read_text()
    return tokenizer
