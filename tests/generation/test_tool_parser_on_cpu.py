"""Hermes tool-call parser: verl's extract_tool_calls on real token ids, and parse() counting malformed blocks."""

import asyncio
import json

import pytest

from hybridrl.generation.tool_parser import (
    FunctionCall,
    HermesToolParser,
    ParsedToolCalls,
    ToolParser,
)


@pytest.fixture(scope="module")
def tokenizer():
    from hybridrl.models.tiny import build_tokenizer

    return build_tokenizer()  # a real byte-level BPE tokenizer with ChatML special tokens


@pytest.fixture(scope="module")
def parser(tokenizer):
    return ToolParser.get_tool_parser("hermes", tokenizer)


def block(payload) -> str:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return f"<tool_call>\n{body}\n</tool_call>"


def test_registry(parser):
    assert isinstance(parser, HermesToolParser) and parser.stop_token_ids == []
    with pytest.raises(ValueError, match=r"unknown tool-call format 'json' .*known formats: \[.*'hermes'"):
        ToolParser.get_tool_parser("json", None)

    @ToolParser.register("test_upper")
    class UpperParser(ToolParser):
        def parse(self, text, tools=None):
            return ParsedToolCalls(content=text.upper())

    assert ToolParser.get_tool_parser("test_upper", None).parse("a").content == "A"


def test_extract_tool_calls_from_token_ids(parser, tokenizer):
    text = (
        "I will compute both."
        + block({"name": "calculator", "arguments": {"expression": "12 * 7"}})
        + block({"name": "lookup", "arguments": {"city": "Zürich", "days": 2}})
        + "<|im_end|>"
    )
    ids = tokenizer.encode(text, add_special_tokens=False)
    content, calls = asyncio.run(parser.extract_tool_calls(ids))
    assert content == "I will compute both.<|im_end|>"  # blocks removed, the rest kept as decoded
    assert calls == [
        FunctionCall(name="calculator", arguments='{"expression": "12 * 7"}'),
        FunctionCall(name="lookup", arguments='{"city": "Zürich", "days": 2}'),  # ensure_ascii=False, as verl
    ]


def test_no_tool_call(parser, tokenizer):
    ids = tokenizer.encode("The answer is 42.", add_special_tokens=False)
    assert asyncio.run(parser.extract_tool_calls(ids)) == ("The answer is 42.", [])
    assert parser.parse("a </tool_call> b") == ParsedToolCalls(content="a </tool_call> b")


@pytest.mark.parametrize(
    "bad_block",
    [
        block("{not json"),
        block({"arguments": {"x": 1}}),  # no name
        block({"name": 7, "arguments": {}}),  # name not a string
        block({"name": "f", "arguments": [1, 2]}),  # arguments not an object
        block({"name": "f"}),  # no arguments (verl drops it too)
        block('["f", {}]'),  # not an object
        block('{"name": "f", "arguments": "not json"}'),
    ],
)
def test_malformed_blocks_are_counted(parser, bad_block):
    good = block({"name": "ok", "arguments": {}})
    parsed = parser.parse("pre " + bad_block + good + " post")
    assert parsed.num_malformed == 1 and parsed.content == "pre  post"
    assert parsed.calls == [FunctionCall(name="ok", arguments="{}")]


def test_arguments_as_a_json_string_are_accepted(parser):
    parsed = parser.parse(block({"name": "f", "arguments": '{"a": 1}'}))
    assert parsed.calls == [FunctionCall(name="f", arguments='{"a": 1}')] and parsed.num_malformed == 0


def test_unclosed_block_counts_as_malformed(parser):
    text = 'Thinking<tool_call>\n{"name": "calculator", "argum'  # cut by the length limit
    assert parser.parse(text) == ParsedToolCalls(content=text, calls=[], num_malformed=1)
    closed_then_open = block({"name": "a", "arguments": {}}) + "<tool_call>{"
    parsed = parser.parse(closed_then_open)
    assert (len(parsed.calls), parsed.num_malformed, parsed.content) == (1, 1, "<tool_call>{")
