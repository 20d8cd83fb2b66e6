"""Every tool-call format of verl 0.9 parsed from what its model family's chat template renders for a tool call.

No model family's tokenizer or chat template is available offline here (transformers ships none, no pip cache holds
one, there is no model hub), so the renderings are hand-written: each ``render_*`` below writes an assistant turn
the way that family's published chat template writes an assistant message with ``tool_calls`` (the text the model
is trained to generate after the generation prompt), and one literal per family (``GOLDEN``) pins the exact text.
Sources: Qwen3-Coder's and Gemma 4's chat templates (as published with the models, mirrored in vLLM's
``examples/tool_chat_template_{qwen3coder,gemma4}.jinja``) and GLM-4.5's: for these three the renderers were checked
character for character against the templates' tool-call code rendered with jinja (one and two calls, with and
without text; the templates are not kept here); OpenAI's harmony format guide for gpt-oss (the model's own output)
and gpt-oss's Hugging Face chat template (past calls); Kimi K2's, Seed-OSS's and MiniMax-M2's chat templates as
documented with those models; DeepSeek-V4's encoder as described in verl 0.9's ``DeepSeekV4ToolParser``.

Each format: one call and two calls, with and without text before them, recovered exactly (name, arguments as
JSON); a malformed call next to a good one is counted, not fatal; text with no call is all content.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from hybridrl.generation.tool_parser import FunctionCall, ToolParser
from hybridrl.tools.schemas import OpenAIFunctionToolSchema

WEATHER = ("get_weather", {"city": "Paris", "days": 2})
SEARCH = ("search", {"query": "best café in Zürich", "filters": {"open": True, "tags": ["wifi", "quiet"]}})
TOOLS = [
    OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
        "name": "get_weather", "description": "Forecast.", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}),
    OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
        "name": "search", "description": "Web search.", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}}, "required": ["query"]}}}),
]  # fmt: skip


def _tojson(value) -> str:
    return json.dumps(value, ensure_ascii=False)  # the templates' ``tojson`` (transformers: ensure_ascii=False)


def _text(value) -> str:
    """A value as templates write it: strings bare, everything else as JSON."""
    return value if isinstance(value, str) else _tojson(value)


# ---------------------------------------------------------------------------- renderings, one per family
def render_qwen3_coder(content: str, calls) -> str:
    """Qwen3-Coder: ``<|im_start|>assistant`` + ``\\n{content}\\n`` + ``\\n<tool_call>\\n<function=f>\\n``
    + ``<parameter=k>\\n{v}\\n</parameter>\\n`` per argument + ``</function>\\n</tool_call>``; the model writes
    what follows the generation prompt ``<|im_start|>assistant\\n``."""
    out = f"\n{content.strip()}\n" if content.strip() else ""
    for name, arguments in calls:
        out += f"\n<tool_call>\n<function={name}>\n"
        out += "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in arguments.items())
        out += "</function>\n</tool_call>"
    return out[1:]


def render_gpt_oss(content: str, calls) -> str:
    """gpt-oss (harmony): a commentary preamble for the user, then one message per call to ``functions.f``."""
    messages = [f"<|channel|>commentary<|message|>{content}<|end|>"] if content else []
    messages += [
        f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{_tojson(arguments)}<|call|>"
        for name, arguments in calls
    ]
    return "<|start|>assistant".join(messages)  # the first header's <|start|>assistant is the generation prompt


def render_glm(content: str, calls) -> str:
    """GLM-4.5/4.6: ``\\n{content}`` then ``\\n<tool_call>f\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n``
    per argument, ``</tool_call>``; after the generation prompt ``<|assistant|>``."""
    out = f"\n{content.strip()}" if content.strip() else ""
    for name, arguments in calls:
        out += f"\n<tool_call>{name}\n"
        out += "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_text(v)}</arg_value>\n" for k, v in arguments.items())
        out += "</tool_call>"
    return out


def render_kimi(content: str, calls) -> str:
    """Kimi K2: ``{content}<|tool_calls_section_begin|>`` + per call ``<|tool_call_begin|>functions.f:i
    <|tool_call_argument_begin|>{json}<|tool_call_end|>`` + ``<|tool_calls_section_end|>``."""
    body = "".join(
        f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{_tojson(arguments)}<|tool_call_end|>"
        for i, (name, arguments) in enumerate(calls)
    )
    return f"{content}<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def render_deepseek_v4(content: str, calls) -> str:
    """DeepSeek-V4 (DSML): ``{content}\\n\\n`` then one ``tool_calls`` block of invokes; ``string="true"`` marks a
    text value, ``"false"`` a JSON one."""
    d = "｜DSML｜"
    out = f"<{d}tool_calls>\n"
    for name, arguments in calls:
        out += f'<{d}invoke name="{name}">\n'
        for k, v in arguments.items():
            is_text = "true" if isinstance(v, str) else "false"
            out += f'<{d}parameter name="{k}" string="{is_text}">{_text(v)}</{d}parameter>\n'
        out += f"</{d}invoke>\n"
    return (f"{content}\n\n" if content else "") + out + f"</{d}tool_calls>"


def _gemma_value(value) -> str:
    """Gemma 4's ``format_argument`` with unquoted keys: strings in ``<|"|>``, booleans bare, keys sorted."""
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return str(value)


def render_gemma4(content: str, calls) -> str:
    """Gemma 4: ``<|tool_call>call:f{k:v,...}<tool_call|>`` per call after the text."""
    return content + "".join(
        f"<|tool_call>call:{name}{_gemma_value(arguments)}<tool_call|>" for name, arguments in calls
    )


def render_seed(content: str, calls) -> str:
    """Seed-OSS: ``<seed:tool_call>\\n<function=f>\\n<parameter=k>v</parameter>\\n...</function>\\n</seed:tool_call>``."""
    out = content
    for name, arguments in calls:
        out += f"<seed:tool_call>\n<function={name}>\n"
        out += "".join(f"<parameter={k}>{_text(v)}</parameter>\n" for k, v in arguments.items())
        out += "</function>\n</seed:tool_call>"
    return out


def render_minimax(content: str, calls) -> str:
    """MiniMax-M2: one ``<minimax:tool_call>`` block with an ``<invoke name="f">`` per call."""
    out = (f"{content}\n" if content else "") + "<minimax:tool_call>\n"
    for name, arguments in calls:
        out += f'<invoke name="{name}">\n'
        out += "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in arguments.items())
        out += "</invoke>\n"
    return out + "</minimax:tool_call>"


RENDER = {
    "qwen3_coder": render_qwen3_coder,
    "gpt-oss": render_gpt_oss,
    "glm": render_glm,
    "kimi": render_kimi,
    "deepseek_v4": render_deepseek_v4,
    "gemma4": render_gemma4,
    "seed": render_seed,
    "minimax": render_minimax,
}

# The exact text of one call with a preamble, per family: the renderers above must produce these.
GOLDEN = {
    "qwen3_coder": "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    "gpt-oss": "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary "
    'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 2}<|call|>',
    "glm": "\nLet me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    "kimi": "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|><|tool_calls_section_end|>',
    "deepseek_v4": 'Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    "gemma4": 'Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
    "seed": "Let me check.<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
    "<parameter=days>2</parameter>\n</function>\n</seed:tool_call>",
    "minimax": 'Let me check.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
    '</parameter>\n<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>',
}

# The content each format returns for the preamble "Let me check." (verl 0.9's, per format).
CONTENT = {
    "qwen3_coder": "Let me check.\n\n",
    "gpt-oss": "<|channel|>commentary<|message|>Let me check.<|end|>",
    "glm": "\nLet me check.\n",
    "kimi": "Let me check.",
    "deepseek_v4": "Let me check.",
    "gemma4": "Let me check.",
    "seed": "Let me check.",
    "minimax": "Let me check.\n",
}


def _calls(parsed):
    return [(call.name, json.loads(call.arguments)) for call in parsed.calls]


@pytest.fixture(scope="module")
def tokenizer():
    from hybridrl.models.tiny import build_tokenizer

    return build_tokenizer()


@pytest.mark.parametrize("name", sorted(RENDER))
def test_renderer_writes_the_templates_text(name):
    assert RENDER[name]("Let me check.", [WEATHER]) == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(RENDER))
@pytest.mark.parametrize("content", ["Let me check.", ""], ids=["with_text", "calls_only"])
@pytest.mark.parametrize("calls", [[WEATHER], [WEATHER, SEARCH]], ids=["one_call", "two_calls"])
def test_calls_are_recovered_from_the_rendering(name, content, calls):
    parsed = ToolParser.get_tool_parser(name, None).parse(RENDER[name](content, calls), TOOLS)
    assert _calls(parsed) == calls and parsed.num_malformed == 0
    assert parsed.content == (CONTENT[name] if content else ("\n" if name == "glm" else ""))  # GLM: a newline first


@pytest.mark.parametrize("name", sorted(RENDER))
def test_text_without_a_call_is_all_content(name):
    text = 'The forecast says sun; <no call here> {"a": 1}'
    assert ToolParser.get_tool_parser(name, None).parse(text).calls == []
    assert ToolParser.get_tool_parser(name, None).parse(text).content == text


MALFORMED = {  # a call that cannot be read, written after a good one (each format's way of going wrong)
    "qwen3_coder": "\n<tool_call>\n<function=get_time\n</tool_call>",  # the function header never closes
    "gpt-oss": "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>"
    "{zone: CET}<|call|>",  # not JSON
    "glm": "\n<tool_call>\n<arg_key>zone</arg_key>\n<arg_value>CET</arg_value>\n</tool_call>",  # no name
    "kimi": "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{zone: CET}<|tool_call_end|>",
    "deepseek_v4": "<｜DSML｜tool_calls>\n<｜DSML｜invoke>\n</｜DSML｜tool_calls>",  # an invoke without a name
    "gemma4": '<|tool_call>call:get_time{zone:<|"|>CET}<tool_call|>',  # a string never closed
    "seed": "<seed:tool_call>\nget_time zone=CET\n</seed:tool_call>",  # no <function=...>
    "minimax": '<minimax:tool_call>\n<invoke name="get_time">\n<parameter name="zone">CET',  # never closed
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_call_is_counted_and_the_good_one_kept(name):
    good = RENDER[name]("Let me check.", [WEATHER])
    if name == "kimi":  # one section holds every call: put the bad call inside it
        text = good.replace("<|tool_calls_section_end|>", MALFORMED[name] + "<|tool_calls_section_end|>")
    else:
        text = good + MALFORMED[name]
    parsed = ToolParser.get_tool_parser(name, None).parse(text, TOOLS)
    assert _calls(parsed) == [WEATHER] and parsed.num_malformed == 1


@pytest.mark.parametrize("name", sorted(RENDER))
def test_extract_tool_calls_decodes_token_ids(name, tokenizer):
    text = RENDER[name]("Let me check.", [WEATHER, SEARCH])
    ids = tokenizer.encode(text, add_special_tokens=False)
    content, calls = asyncio.run(ToolParser.get_tool_parser(name, tokenizer).extract_tool_calls(ids, TOOLS))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [WEATHER, SEARCH]
    assert content == CONTENT[name]


# ---------------------------------------------------------------------------- format specifics
def test_qwen3_coder_types_follow_the_schemas():
    """Without schemas every value stays text (verl 0.9); with them, by the declared type."""
    parser = ToolParser.get_tool_parser("qwen3_coder", None)
    text = render_qwen3_coder("", [WEATHER])
    assert _calls(parser.parse(text)) == [("get_weather", {"city": "Paris", "days": "2"})]
    assert _calls(parser.parse(text, [t.model_dump() for t in TOOLS])) == [WEATHER]  # schema dicts work too
    number = "<tool_call>\n<function=f>\n<parameter=x>\nnull\n</parameter>\n</function>\n</tool_call>"
    assert _calls(parser.parse(number)) == [("f", {"x": None})]  # null is None whatever the type
    cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"  # cut by the length limit: read as verl
    assert _calls(parser.parse(cut, TOOLS)) == [("get_weather", {"city": "Par"})]


def test_gpt_oss_reads_the_hf_template_header_and_drops_the_reasoning():
    parser = ToolParser.get_tool_parser("gpt-oss", None)
    history = (
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
    )
    assert _calls(parser.parse(history)) == [("get_weather", {"city": "Paris"})]
    first = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
    assert _calls(parser.parse(first)) == [("get_weather", {"city": "Paris"})]  # that form right after the prompt
    reasoning = "<|channel|>analysis<|message|>Call get_weather? to=functions.x maybe.<|end|><|start|>assistant"
    parsed = parser.parse(reasoning + render_gpt_oss("", [WEATHER]))
    assert _calls(parsed) == [WEATHER] and parsed.content == ""  # the reasoning went, and the call with its header
    cut = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Pa'
    assert parser.parse(cut).num_malformed == 1 and parser.parse(cut).calls == []


def test_glm_47_without_newlines_and_a_leading_think_block():
    text = "<think>Need it.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
    text += "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
    parsed = ToolParser.get_tool_parser("glm", None).parse(text)
    assert _calls(parsed) == [WEATHER] and parsed.content == "Sure."
    unclosed = ToolParser.get_tool_parser("glm", None).parse("<tool_call>get_weather<arg_key>city")
    assert unclosed.calls == [] and unclosed.num_malformed == 1


def test_kimi_keeps_the_call_id_and_names_odd_ids_from_the_tools():
    parser = ToolParser.get_tool_parser("kimi", None)
    parsed = parser.parse(render_kimi("", [WEATHER, SEARCH]))
    assert [c.tool_call_id for c in parsed.calls] == ["functions.get_weather:0", "functions.search:1"]
    odd = '<|tool_calls_section_begin|><|tool_call_begin|>get-weather-7<|tool_call_argument_begin|>{"city": "Rome"}'
    odd += "<|tool_call_end|><|tool_calls_section_end|>"
    assert parser.parse(odd, TOOLS).calls[0].name == "get_weather"  # the one tool whose name the id contains
    assert parser.parse(odd).calls[0].name == "get-weather-7"  # no tools offered: the id as it is
    spaced = "<|tool_calls_section_begin|>\n<|tool_call_begin|>\nfunctions.get_weather:0<|tool_call_argument_begin|>\n"
    spaced += '{"city": "Paris", "days": 2}\n<|tool_call_end|>\n<|tool_calls_section_end|>'  # as models also write it
    assert _calls(parser.parse(spaced)) == [WEATHER]


def test_deepseek_v4_strips_reasoning_and_end_of_sentence():
    text = "<think>plan</think>Let me check.\n\n" + render_deepseek_v4("", [WEATHER]) + "<｜end▁of▁sentence｜>"
    parsed = ToolParser.get_tool_parser("deepseek_v4", None).parse(text)
    assert _calls(parsed) == [WEATHER] and parsed.content == "Let me check."
    no_call = ToolParser.get_tool_parser("deepseek_v4", None).parse("<think>x</think>Hi<｜end▁of▁sentence｜>")
    assert no_call.content == "Hi" and no_call.calls == []


def test_gemma4_reads_nested_values_and_bare_literals():
    text = '<|tool_call>call:f{a:[1,2.5,<|"|>x, y<|"|>],b:{c:false,d:null},e:-3}<tool_call|>'
    assert _calls(ToolParser.get_tool_parser("gemma4", None).parse(text)) == [
        ("f", {"a": [1, 2.5, "x, y"], "b": {"c": False, "d": None}, "e": -3})
    ]


def test_stop_tokens_are_the_formats_turn_enders_when_the_tokenizer_has_them(tokenizer):
    assert ToolParser.get_tool_parser("gemma4", tokenizer).stop_token_ids == []  # the tiny vocabulary lacks them
    extended = build_with_tokens(["<tool_call|>", "<|observation|>"])
    assert ToolParser.get_tool_parser("gemma4", extended).stop_token_ids == [
        extended.convert_tokens_to_ids("<tool_call|>")
    ]
    assert ToolParser.get_tool_parser("glm", extended).stop_token_ids == [
        extended.convert_tokens_to_ids("<|observation|>")
    ]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ToolParser.get_tool_parser("kimi", tokenizer).stop_token_ids == [im_end]
    for name in ("hermes", "qwen3_coder", "gpt-oss", "deepseek_v4", "seed", "minimax"):
        assert ToolParser.get_tool_parser(name, tokenizer).stop_token_ids == []


def build_with_tokens(tokens: list[str]):
    from hybridrl.models.tiny import build_tokenizer

    extended = build_tokenizer()
    extended.add_special_tokens({"additional_special_tokens": tokens})
    return extended


def test_every_format_returns_the_shared_call_type():
    parsed = ToolParser.get_tool_parser("minimax", None).parse(render_minimax("", [WEATHER]))
    assert parsed.calls == [FunctionCall(name="get_weather", arguments='{"city": "Paris", "days": 2}')]


# ---------------------------------------------------------------------------- verl 0.9's qwen3_coder tests, adapted
# (verl v0.9.0 tests/experimental/agent_loop/test_qwen3_tool_parser_on_cpu.py: the per-function reader under verl's
# name, ``_parse_xml_function_call(function body, tools)``.)
def _list_tool(param_type: str) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
        "name": "list_tool", "description": "a test tool",
        "parameters": {"type": "object", "properties": {"items": {"type": param_type}}, "required": []}}})  # fmt: skip


def _read(body: str, tools):
    return ToolParser.get_tool_parser("qwen3_coder", None)._parse_xml_function_call(body, tools)


def test_verl_qwen3_array_literal_and_no_code_execution(tmp_path):
    assert _read("list_tool><parameter=items>[1, 2, 3]</parameter>", [_list_tool("array")]).arguments == (
        '{"items": [1, 2, 3]}'
    )
    marker = tmp_path / "pwned.txt"
    payload = f'__import__("os").system("echo pwned > {marker}")'  # model output must never be executed
    call = _read(f"list_tool><parameter=items>{payload}</parameter>", [_list_tool("array")])
    assert not marker.exists() and json.loads(call.arguments)["items"] == payload


def test_verl_qwen3_truncations():
    cut_param = _read("list_tool><parameter=items>valid</parameter><parameter=truncated", [_list_tool("string")])
    assert json.loads(cut_param.arguments) == {"items": "valid"}  # the cut parameter dropped, the good one kept
    assert _read("list_tool", []) is None  # a function header never closed
    assert json.loads(_read("list_tool><parameter=items>value</parameter>", None).arguments) == {"items": "value"}
