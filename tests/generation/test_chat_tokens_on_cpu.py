"""ChatTokens: a token list built turn by turn (prompt_ids, model ids verbatim, turn_ids) equals a full
re-render token for token, with three real chat templates: SmolLM2-135M-Instruct's (real tokenizer), a
Qwen2.5-style hermes template with tools (fixture file) and the tiny model's own template."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.models.tiny import build_tokenizer
from hybridrl.utils.dataset.rl_dataset import RLHFDataset

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
SMOLLM2_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hybridrl" / "smollm2-135m-instruct"

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 12 * 7"}},
            "required": ["expression"],
        },
    },
}
PROMPT = [
    {"role": "system", "content": "You are a careful assistant. Use the calculator."},
    {"role": "user", "content": "What is 12 * 7 + 5 * 3?"},
]


def tool_call(expression: str) -> str:
    call = {"name": "calculator", "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def tool(content: str) -> dict:
    return {"role": "tool", "content": content}


# (what the model says, the messages that follow it); the last turn ends the conversation.
SCRIPT = [
    (tool_call("12 * 7"), [tool("84")]),
    ("Now the second product.\n" + tool_call("5 * 3") + "\n" + tool_call("84 + 15"), [tool("15"), tool("99")]),
    ("The answer is 99.", [{"role": "user", "content": "Are you sure? Check 84 + 15."}]),
    (tool_call("84 + 15"), [tool("99")]),
    ("Yes: 84 + 15 = 99.", []),
]


# ---------------------------------------------------------------------------- tokenizers
def tiny_tokenizer(template_file: str | None = None):
    tokenizer = build_tokenizer()
    if template_file is not None:
        tokenizer.chat_template = (TEMPLATES / template_file).read_text()
    return tokenizer


def smollm2_tokenizer():
    if not (SMOLLM2_DIR / "tokenizer.json").exists():
        pytest.skip(
            f"SmolLM2-135M-Instruct not prepared at {SMOLLM2_DIR}: run `python examples/quickstart/prepare_model.py` "
            "(the Qwen2.5-style and tiny templates still cover the logic)"
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(SMOLLM2_DIR))


@pytest.fixture(scope="module", params=["smollm2", "qwen2_5_tools", "tiny"])
def case(request):
    """(tokenizer, tools) for each chat template under test."""
    if request.param == "smollm2":
        return smollm2_tokenizer(), None
    if request.param == "qwen2_5_tools":
        return tiny_tokenizer("qwen2_5_hermes_tools.jinja"), [CALCULATOR]
    return tiny_tokenizer(), None


# ---------------------------------------------------------------------------- helpers
def render_ids(tokenizer, messages, tools=None, add_generation_prompt=False, **kwargs) -> list[int]:
    """The full re-render, independent of ChatTokens: template text, then ids without added specials."""
    if tools is not None:
        kwargs["tools"] = tools
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
    )
    return tokenizer.encode(text, add_special_tokens=False)


def model_turn(tokenizer, text: str) -> list[int]:
    """What a model stopping on its EOS returns: the text's ids + the EOS id."""
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def build_conversation(chat: ChatTokens, tokenizer, script=SCRIPT, prompt=PROMPT):
    """Play ``script`` as the agent loop does; returns (messages, token_ids, response_mask, turn_starts)."""
    messages, ids = list(prompt), chat.prompt_ids(prompt)
    mask, turn_starts = [0] * len(ids), []
    for text, following in script:
        generated = model_turn(tokenizer, text)
        ids, mask = ids + generated, mask + [1] * len(generated)
        messages.append({"role": "assistant", "content": chat.assistant_content(generated)})
        if following:
            turn_starts.append(len(ids))
            appended = chat.turn_ids(following, generated[-1])
            ids, mask = ids + appended, mask + [0] * len(appended)
            messages.extend(following)
    return messages, ids, mask, turn_starts


# ---------------------------------------------------------------------------- exact accounting
def test_turn_by_turn_ids_equal_the_full_rerender(case):
    tokenizer, tools = case
    chat = ChatTokens(tokenizer, tools=tools)
    messages, ids, mask, _ = build_conversation(chat, tokenizer)
    assert [m["role"] for m in messages].count("assistant") == 5
    # The re-render closes the last assistant turn with the tail the model never generates ("\n").
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert chat.turn_end_ids == [tokenizer.eos_token_id, *newline]
    assert ids + newline == render_ids(tokenizer, messages, tools)
    assert chat.check(messages, ids, "strict") is None
    assert chat.check(messages, ids, "ignore_strippable") is None
    # The mask covers exactly the model's tokens: their count is the sum of the simulated turns.
    assert sum(mask) == sum(len(model_turn(tokenizer, text)) for text, _ in SCRIPT)


def test_turn_ids_layout_after_a_tool_call(case):
    tokenizer, tools = case
    chat = ChatTokens(tokenizer, tools=tools)
    appended = chat.turn_ids([tool("84")], tokenizer.eos_token_id)
    text = tokenizer.decode(appended, skip_special_tokens=False)
    expected = {
        "qwen2_5_tools": "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        "smollm2": "\n<|im_start|>tool\n84<|im_end|>\n<|im_start|>assistant\n",
        "tiny": "\n<|im_start|>tool\n84<|im_end|>\n<|im_start|>assistant\n",
    }
    assert text in expected.values()
    # The tools' system prompt appears only in the first prompt, never in a turn's delta.
    assert "<tools>" not in text
    if tools:
        assert "<tools>\n" + json.dumps(CALCULATOR) in tokenizer.decode(chat.prompt_ids(PROMPT))


def test_a_dropped_newline_is_reported_at_its_position(case):
    tokenizer, tools = case
    chat = ChatTokens(tokenizer, tools=tools)
    messages, ids, _, turn_starts = build_conversation(chat, tokenizer)
    newline_id = tokenizer.encode("\n", add_special_tokens=False)[0]
    at = turn_starts[1]  # the "\n" after the second model turn's <|im_end|>
    assert ids[at - 1] == tokenizer.eos_token_id and ids[at] == newline_id
    broken = ids[:at] + ids[at + 1 :]
    mismatch = chat.check(messages, broken, "strict")
    assert mismatch.position == at
    assert mismatch.expected_ids[0] == newline_id and mismatch.actual_ids[0] == broken[at]
    assert "the texts differ" in mismatch.context_text
    # verl's ignore_strippable: a whitespace-only difference is not reported ...
    assert chat.check(messages, broken, "ignore_strippable") is None
    assert chat.check(messages, broken, "disable") is None
    # ... but a changed word is, at its position.
    word = tokenizer.encode("x", add_special_tokens=False)
    changed = ids[:at] + word + ids[at:]
    assert chat.check(messages, changed, "ignore_strippable").position == at
    assert chat.check(messages, changed, "strict").position == at


def test_non_canonical_model_tokens_are_reported(case):
    """A model may spell a text with other ids than the tokenizer would; a re-render cannot reproduce them."""
    tokenizer, tools = case
    chat = ChatTokens(tokenizer, tools=tools)
    text = "The answer is 99."
    canonical = tokenizer.encode(text, add_special_tokens=False)
    spelled = [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)]
    assert spelled != canonical and tokenizer.decode(spelled) == text
    ids = chat.prompt_ids(PROMPT) + spelled + [tokenizer.eos_token_id]
    messages = [*PROMPT, {"role": "assistant", "content": text}]
    first_split = next(k for k, (a, b) in enumerate(zip(canonical, spelled)) if a != b)
    for mode in ("strict", "ignore_strippable"):
        mismatch = chat.check(messages, ids, mode)
        assert mismatch.position == len(chat.prompt_ids(PROMPT)) + first_split
        assert "not the tokenizer's canonical one" in mismatch.context_text


# ---------------------------------------------------------------------------- end of a model turn
def test_a_turn_without_the_end_of_turn_token_is_closed_by_the_template_tail():
    tokenizer = tiny_tokenizer()
    chat = ChatTokens(tokenizer)
    im_end, newline = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.encode("\n", add_special_tokens=False)
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    delta = chat.delta_ids([tool("4")])
    assert chat.turn_ids([tool("4")], im_end) == newline + delta
    # a stop on another EOS id, a length stop on an ordinary token, no token at all: close with <|im_end|>\n
    for last in (endoftext, newline[0], tokenizer.encode("4", add_special_tokens=False)[0], None):
        assert chat.turn_ids([tool("4")], last) == [im_end, *newline, *delta]
    # A turn ending on <|endoftext|> keeps it: content and re-render agree on "...<|endoftext|><|im_end|>\n".
    generated = tokenizer.encode("42", add_special_tokens=False) + [endoftext]
    assert chat.assistant_content(generated) == "42<|endoftext|>"
    ids = chat.prompt_ids(PROMPT) + generated + chat.turn_ids([tool("4")], endoftext)
    messages = [*PROMPT, {"role": "assistant", "content": chat.assistant_content(generated)}, tool("4")]
    assert chat.check(messages, ids, "strict") is None


def test_assistant_content_strips_only_the_template_end_of_turn():
    tokenizer = tiny_tokenizer()
    chat = ChatTokens(tokenizer)
    ids = tokenizer.encode("a <b>\n", add_special_tokens=False)
    assert chat.assistant_content(ids + [tokenizer.eos_token_id]) == "a <b>\n"
    assert chat.assistant_content(ids) == "a <b>\n"


# ---------------------------------------------------------------------------- templates that rewrite turns
def test_a_template_that_rewrites_earlier_turns_does_not_change_the_token_list():
    """Qwen3-style: earlier assistant turns lose <think>; the token list keeps what the model generated."""
    tokenizer = tiny_tokenizer("qwen3_style_think.jinja")
    chat = ChatTokens(tokenizer)
    script = [("<think>\nmultiply\n</think>\n\n" + tool_call("12 * 7"), [tool("84")]), ("84.", [])]
    messages, ids, _, _ = build_conversation(chat, tokenizer, script)
    think = tokenizer.encode("<think>\nmultiply\n</think>\n\n", add_special_tokens=False)
    first_model_token = len(chat.prompt_ids(PROMPT))
    assert ids[first_model_token : first_model_token + len(think)] == think
    # The full re-render drops the think block: strict reports it where "<think>" and "<tool_call>" part.
    with_think = tokenizer.encode(script[0][0], add_special_tokens=False)
    without_think = tokenizer.encode(tool_call("12 * 7"), add_special_tokens=False)
    parting = next(k for k, (a, b) in enumerate(zip(with_think, without_think)) if a != b)
    mismatch = chat.check(messages, ids, "strict")
    assert mismatch.position == first_model_token + parting
    assert tokenizer.decode(mismatch.actual_ids).startswith("think>")


def test_chat_template_kwargs_reach_prompt_and_turn_renders():
    tokenizer = tiny_tokenizer("qwen3_style_think.jinja")
    chat = ChatTokens(tokenizer, chat_template_kwargs={"enable_thinking": False})
    empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert tokenizer.decode(chat.prompt_ids(PROMPT)).endswith(empty_think)
    assert tokenizer.decode(chat.turn_ids([tool("84")], tokenizer.eos_token_id)).endswith(empty_think)
    assert chat.prompt_ids(PROMPT) == render_ids(tokenizer, PROMPT, add_generation_prompt=True, enable_thinking=False)


def test_a_template_that_is_not_prefix_stable_is_refused_with_the_reason():
    tokenizer = tiny_tokenizer()
    # Renders the number of messages first: appending a message rewrites the start of the text.
    tokenizer.chat_template = (
        "{{ messages | length }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    chat = ChatTokens(tokenizer)
    with pytest.raises(ValueError, match="not prefix-stable"):
        chat.turn_ids([tool("4")], tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="tokenization_sanity_check_mode"):
        chat.check(PROMPT, [], "lenient")


# ---------------------------------------------------------------------------- the dataset's prompt ids
@pytest.mark.parametrize("template", ["smollm2", "qwen2_5_hermes_tools.jinja", "tiny"])
def test_prompt_ids_equal_the_rl_datasets(template, tmp_path):
    if template == "smollm2":
        tokenizer, custom_template = smollm2_tokenizer(), None
    else:
        custom_template = None if template == "tiny" else (TEMPLATES / template).read_text()
        tokenizer = tiny_tokenizer()
    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": PROMPT, "extra_info": {"index": 0}}]), str(path))
    dataset = RLHFDataset(str(path), tokenizer, {"max_prompt_length": 512, "custom_chat_template": custom_template})
    chat = ChatTokens(tokenizer, chat_template=custom_template)
    assert chat.prompt_ids(PROMPT) == dataset[0]["raw_prompt_ids"]
