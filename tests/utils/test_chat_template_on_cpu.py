"""``hybridrl.utils.tokenizer`` / ``hybridrl.utils.tokenizer.chat_template``: verl 0.9's token-id and chat-template
helpers, on the local tiny tokenizer with real chat templates, cross-checked with hybridrl's own text-level
accounting (``generation.chat_tokens``)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.models.tiny import build_tokenizer
from hybridrl.utils import chat_template as chat_template_path_of_verl_0_8
from hybridrl.utils.tokenizer import get_processor_token_id, normalize_token_ids
from hybridrl.utils.tokenizer.chat_template import (
    apply_chat_template,
    extract_system_prompt_and_generation,
    initialize_system_prompt,
    initialize_turn_separator,
)

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"


@pytest.fixture(scope="module", params=["tiny", "qwen2_5_hermes_tools.jinja", "qwen3_style_think.jinja"])
def tokenizer(request):
    tokenizer = build_tokenizer()
    if request.param != "tiny":
        tokenizer.chat_template = (TEMPLATES / request.param).read_text()
    return tokenizer


@pytest.mark.parametrize(
    "output, expected",
    [
        ([5, 6], [5, 6]),
        ((5, 6), [5, 6]),
        (np.array([5, 6]), [5, 6]),
        (torch.tensor([[5, 6]]), [5, 6]),  # a batch of one
        ({"input_ids": [[5, 6]], "attention_mask": [[1, 1]]}, [5, 6]),  # transformers 5's BatchEncoding
        ([np.int64(5), torch.tensor(6)], [5, 6]),
    ],
)
def test_normalize_token_ids(output, expected):
    assert normalize_token_ids(output) == expected


@pytest.mark.parametrize("bad", ["text", {"attention_mask": [1]}, [[1, 2], [3, 4]], [1, None], [1.5]])
def test_normalize_token_ids_refuses_what_is_not_ids(bad):
    with pytest.raises(TypeError):
        normalize_token_ids(bad)


def test_processor_token_id():
    class Tokenizer:
        def convert_tokens_to_ids(self, token):
            return {"<image>": 42}.get(token)

    class Processor:
        image_token = "<image>"
        video_token_id = 7
        tokenizer = Tokenizer()

    assert get_processor_token_id(Processor(), "image") == 42
    assert get_processor_token_id(Processor(), "video") == 7
    assert get_processor_token_id(None, "image") is None


def test_separator_agrees_with_the_text_level_accounting(tokenizer):
    """The tail hybridrl's agent loop appends after a model turn stopped on eos is the separator verl derives."""
    separator = initialize_turn_separator(tokenizer)
    assert separator == ChatTokens(tokenizer).missing_tail(tokenizer.eos_token_id)
    assert tokenizer.decode(separator) == "\n"  # ChatML-style templates end each turn with "<|im_end|>\n"


def test_incremental_tokens_equal_the_full_render(tokenizer):
    """prompt + (model turn + eos + separator + tool turn) ... equals the template's render of the conversation."""
    system_prompt, generation_prompt = extract_system_prompt_and_generation(tokenizer)
    separator = initialize_turn_separator(tokenizer)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    ids = normalize_token_ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
    assert ids[: len(system_prompt)] == system_prompt and ids[-len(generation_prompt) :] == generation_prompt
    for reply, result in [("call calc", "5"), ("check again", "5")]:
        ids += tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_token_id] + separator
        tool_turn = [{"role": "tool", "content": result}]
        rendered = normalize_token_ids(tokenizer.apply_chat_template(tool_turn, add_generation_prompt=True))
        ids += rendered[len(system_prompt) :]
        messages += [{"role": "assistant", "content": reply}, *tool_turn]
    full = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ids == tokenizer.encode(full, add_special_tokens=False)


def test_apply_chat_template_renders_messages_without_a_user_turn():
    class NeedsUser:
        """A template that refuses a conversation without a user turn (as Qwen3.5's)."""

        def apply_chat_template(self, messages, add_generation_prompt, tokenize, tools, return_dict):
            if not any(message["role"] == "user" for message in messages):
                raise ValueError("no user query found")
            text = "".join(f"[{message['role']}]" for message in messages) + ("[gen]" if add_generation_prompt else "")
            return [ord(char) for char in text] if tokenize else text

    tool_only = [{"role": "tool", "content": "5"}]
    assert apply_chat_template(NeedsUser(), tool_only, tokenize=False) == "[tool][gen]"
    assert apply_chat_template(NeedsUser(), tool_only) == [ord(char) for char in "[tool][gen]"]


def test_verl_0_8_path_reexports():
    assert chat_template_path_of_verl_0_8.initialize_system_prompt is initialize_system_prompt
