"""initialize_tools_from_config / load_all_tools: verl's tool YAML, at both verl paths, with clear errors."""

import asyncio
import os
import textwrap

import pytest

from hybridrl.tools.calculator_tool import CalculatorTool
from hybridrl.tools.gsm8k_tool import Gsm8kTool
from hybridrl.tools.tool_registry import initialize_tools_from_config, load_all_tools
from hybridrl.tools.utils import tool_registry as verl_0_5_path

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
TOOL_CONFIGS = os.path.join(REPO, "examples", "sglang_multiturn", "config", "tool_config")


def write(tmp_path, text, name="tools.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_shipped_gsm8k_config_loads_at_both_verl_paths():
    path = os.path.join(TOOL_CONFIGS, "gsm8k_tool_config.yaml")
    assert verl_0_5_path.initialize_tools_from_config is initialize_tools_from_config
    [tool] = initialize_tools_from_config(path)
    assert isinstance(tool, Gsm8kTool) and tool.name == "calc_gsm8k_reward"
    assert tool.config == {"type": "native"}
    assert tool.tool_schema.function.parameters.required == ["answer"]


@pytest.mark.parametrize(
    "file, cls, name",
    [("calculator_tool_config.yaml", "CalculatorTool", "calculator"),
     ("code_interpreter_tool_config.yaml", "CodeInterpreterTool", "code_interpreter")],
)  # fmt: skip
def test_shipped_configs_load(file, cls, name):
    [tool] = initialize_tools_from_config(os.path.join(TOOL_CONFIGS, file))
    assert (type(tool).__name__, tool.name) == (cls, name)


def test_verl_class_path_reads_as_hybridrl(tmp_path):
    path = write(
        tmp_path,
        """
        tools:
          - class_name: verl.tools.gsm8k_tool.Gsm8kTool
            config: {type: native, timeout: 3}
            tool_schema:
              type: function
              function: {name: calc_gsm8k_reward, description: d,
                         parameters: {type: object, properties: {answer: {type: string}}, required: [answer]}}
          - class_name: hybridrl.tools.calculator_tool.CalculatorTool
            config: {}
    """,
    )
    gsm8k, calculator = initialize_tools_from_config(path)
    assert isinstance(gsm8k, Gsm8kTool) and gsm8k.config == {"type": "native", "timeout": 3}
    assert isinstance(calculator, CalculatorTool) and calculator.name == "calculator"  # its own default schema


def test_verl_tool_hybridrl_lacks_is_named(tmp_path):
    path = write(
        tmp_path,
        """
        tools:
          - class_name: verl.tools.search_tool.SearchTool
            config: {type: native}
    """,
    )
    with pytest.raises(ModuleNotFoundError) as info:  # verl's type: code catching it keeps working
        initialize_tools_from_config(path)
    message = str(info.value)
    assert info.value.name == "hybridrl.tools.search_tool"
    assert f"tools[0] of {path}" in message and "read as 'hybridrl.tools.search_tool.SearchTool'" in message
    assert "hybridrl does not provide that verl module" in message


def test_missing_class_in_existing_module_lists_classes(tmp_path):
    path = write(tmp_path, "tools:\n  - class_name: hybridrl.tools.gsm8k_tool.Gsm9kTool\n")
    with pytest.raises(
        ValueError, match=r"'hybridrl.tools.gsm8k_tool' has no 'Gsm9kTool' \(its classes: .*'Gsm8kTool'"
    ):
        initialize_tools_from_config(path)


@pytest.mark.parametrize(
    "text, match",
    [
        ("tools: {a: 1}\n", "needs a top-level `tools:` list"),
        ("other: []\n", "needs a top-level `tools:` list"),
        ("tools: [{config: {}}]\n", r"tools\[0\] .*needs `class_name`"),
        ("tools: [{class_name: Gsm8kTool}]\n", "must be a dotted import path"),
        ("tools: [{class_name: hybridrl.tools.calculator_tool.CalculatorTool, config: {type: mcp}}]\n",
         "config.type 'mcp' is not supported"),
        ("tools: [{class_name: hybridrl.tools.calculator_tool.CalculatorTool,"
         " tool_schema: {type: function, function: {name: c}}}]\n", r"(?s)tools\[0\] .*invalid tool_schema:.*function.description.*Field required"),
        ("tools: [{class_name: hybridrl.tools.gsm8k_tool.Gsm8kTool}]\n", r"Gsm8kTool\(config=\.\.\., tool_schema=\.\.\.\) raised"),
        ("tools: [{class_name: hybridrl.tools.schemas.ToolResponse}]\n",
         r"is not a BaseTool: derive it from hybridrl.tools.base_tool.BaseTool \(it was not constructed\)"),
        ("tools:\n  - {class_name: hybridrl.tools.calculator_tool.CalculatorTool}\n"
         "  - {class_name: hybridrl.tools.calculator_tool.CalculatorTool}\n", r"declares the tool name\(s\) \['calculator'\] more"),
        ("tools: [\n", "is not valid YAML"),
    ],
)  # fmt: skip
def test_bad_files_name_file_and_entry(tmp_path, text, match):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=match) as info:
        initialize_tools_from_config(path)
    assert path in str(info.value)


NOT_A_TOOL = """
import pathlib


class Builder:
    def __init__(self, **kwargs):
        pathlib.Path({marker!r}).write_text("constructed")  # what a class that is not a tool could do
"""


def test_a_class_that_is_not_a_tool_is_refused_before_construction(tmp_path, monkeypatch):
    marker = tmp_path / "constructed"
    (tmp_path / "not_a_tool_module.py").write_text(NOT_A_TOOL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(tmp_path, "tools: [{class_name: not_a_tool_module.Builder, config: {x: 1}}]\n")
    with pytest.raises(ValueError, match=r"tools\[0\] of .*'not_a_tool_module.Builder' is not a BaseTool"):
        initialize_tools_from_config(path)
    assert not marker.exists()  # before: Builder(config=..., tool_schema=...) ran, then was found not to be a tool


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="multi_turn.tool_config_path"):
        initialize_tools_from_config(str(tmp_path / "absent.yaml"))


FUNCTIONS = '''
from hybridrl.tools.function_tool import function_tool


@function_tool("{name}")
def double(x: int) -> int:
    """Double a number.

    Args:
        x: the number
    """
    return 2 * x
'''


def test_load_all_tools_merges_and_rejects_collisions(tmp_path):
    yaml_path = os.path.join(TOOL_CONFIGS, "calculator_tool_config.yaml")
    (tmp_path / "ok.py").write_text(FUNCTIONS.replace("{name}", "double_registry_test"))
    tools = load_all_tools(yaml_path, str(tmp_path / "ok.py"))
    assert [tool.name for tool in tools] == ["calculator", "double_registry_test"]
    assert asyncio.run(tools[1].execute("i", {"x": 21}))[0].text == "42"
    (tmp_path / "clash.py").write_text(FUNCTIONS.replace("{name}", "calculator"))
    with pytest.raises(ValueError, match=r"function tool name\(s\) \['calculator'\] .* also declared in"):
        load_all_tools(yaml_path, str(tmp_path / "clash.py"))
    assert load_all_tools(None, None) == []


def test_module_importing_an_absent_package_names_that_package(tmp_path, monkeypatch):
    (tmp_path / "my_tools_needing_x.py").write_text("import absent_pkg_for_hybridrl_test\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(tmp_path, "tools:\n  - class_name: my_tools_needing_x.MyTool\n")
    with pytest.raises(ModuleNotFoundError, match="needs module 'absent_pkg_for_hybridrl_test', which is not") as info:
        initialize_tools_from_config(path)
    assert info.value.name == "absent_pkg_for_hybridrl_test" and path in str(info.value)
