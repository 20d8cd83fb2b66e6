"""verl v0.5.0's ``tests/tools/test_base_tool_on_cpu.py``, adapted: a tool YAML/JSON naming local classes loads
them, and one naming a module that does not exist raises ``ModuleNotFoundError`` (verl's type).

Adapted for hybridrl (imports ``verl`` → ``hybridrl``; the config file lives in ``tmp_path`` instead of a fixed
``/tmp`` path; the tools are written anew here). The class paths name this file by its module path relative to the
repository root (``tests.tools.test_base_tool_on_cpu``), as verl's test does, so they resolve when pytest runs from
the root (``rootdir`` on ``sys.path``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from transformers.utils import get_json_schema

from hybridrl.tools.base_tool import BaseTool, OpenAIFunctionToolSchema
from hybridrl.tools.utils.tool_registry import initialize_tools_from_config

THIS_MODULE = "tests.tools.test_base_tool_on_cpu"


class WeatherToolForTest(BaseTool):
    """A tool whose schema comes from a documented Python function (transformers' ``get_json_schema``)."""

    def get_current_temperature(self, location: str, unit: str = "celsius"):
        """Current temperature at a location.

        Args:
            location: The location, as "City, State, Country".
            unit: The unit of the temperature. (choices: ["celsius", "fahrenheit"])
        """
        return {"temperature": 26.1, "location": location, "unit": unit}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema(**get_json_schema(self.get_current_temperature))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        try:
            return json.dumps(self.get_current_temperature(**parameters)), 0, {}
        except Exception as exc:  # a bad call is the model's mistake: answer it, do not crash
            return str(exc), 0, {}


class WeatherToolWithDataForTest(BaseTool):
    """Like ``WeatherToolForTest`` with a second required argument."""

    def get_temperature_date(self, location: str, date: str, unit: str = "celsius"):
        """Temperature at a location on a date.

        Args:
            location: The location, as "City, State, Country".
            date: The date, as "Year-Month-Day".
            unit: The unit of the temperature. (choices: ["celsius", "fahrenheit"])
        """
        return {"temperature": 25.9, "location": location, "date": date, "unit": unit}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema(**get_json_schema(self.get_temperature_date))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        try:
            return json.dumps(self.get_temperature_date(**parameters)), 0, {}
        except Exception as exc:
            return str(exc), 0, {}


def _write_config(tmp_path, class_names: list[str]) -> str:
    path = tmp_path / "tool_config.json"  # a JSON file is YAML too
    path.write_text(json.dumps({"tools": [{"class_name": c, "config": {"type": "native"}} for c in class_names]}))
    return str(path)


def test_initialize_tools_from_fake_config(tmp_path):
    fake = "tests.workers.rollout.fake_path.test_vllm_chat_scheduler"
    path = _write_config(tmp_path, [f"{fake}.WeatherTool", f"{fake}.WeatherToolWithData"])
    with pytest.raises(ModuleNotFoundError) as info:
        initialize_tools_from_config(path)
    assert path in str(info.value) and f"module '{fake}' not found" in str(info.value)


def test_initialize_tools_from_local_config(tmp_path):
    path = _write_config(tmp_path, [f"{THIS_MODULE}.WeatherToolForTest", f"{THIS_MODULE}.WeatherToolWithDataForTest"])
    tools = initialize_tools_from_config(path)

    from tests.tools.test_base_tool_on_cpu import WeatherToolForTest, WeatherToolWithDataForTest

    assert len(tools) == 2
    assert isinstance(tools[0], WeatherToolForTest) and isinstance(tools[1], WeatherToolWithDataForTest)
    assert tools[0].config == {"type": "native"} and tools[1].config == {"type": "native"}
    assert [tool.name for tool in tools] == ["get_current_temperature", "get_temperature_date"]
