"""The tool interface of verl (``verl.tools.base_tool.BaseTool``), verl 0.9's return shapes.

A tool serves many conversations at once; each conversation gets an *instance* (``create``), calls it
(``execute``) any number of times, may read a final reward (``calc_reward``) and ends it (``release``).

Lifecycle and shapes::

    instance_id, creation_response = await tool.create(instance_id=None, **create_kwargs)   # str, ToolResponse
    response, step_reward, metrics  = await tool.execute(instance_id, parameters, **kw)     # ToolResponse, float, dict
    reward                          = await tool.calc_reward(instance_id, **kw)             # float
    await tool.release(instance_id, **kw)

verl 0.5 tools return a bare ``instance_id`` from ``create`` and a ``str`` response from ``execute``;
:mod:`hybridrl.tools.executor` accepts both, so such tools work unchanged. ``create_kwargs`` are the
row's ``extra_info.tools_kwargs.<tool name>.create_kwargs``; verl 0.9's agent loop passes them as one
``create_kwargs=`` dict, verl 0.5 as keywords, and the executor passes both forms where accepted.

``OpenAIFunctionToolSchema`` and ``ToolResponse`` are re-exported here, as in verl.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from hybridrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "OpenAIFunctionToolSchema", "ToolResponse"]

logger = logging.getLogger(__name__)


class BaseTool:
    """Base class of tools; subclasses override the async methods they need.

    Args:
        config: the tool's ``config`` mapping from the tool YAML (``type: native``, ``timeout``, own keys).
        tool_schema: the OpenAI schema (a model or its dict); ``None`` when the subclass's
            :meth:`get_openai_tool_schema` supplies it.

    Attributes:
        name: ``tool_schema.function.name``, the name the model calls the tool by.
    """

    def __init__(self, config: dict | None, tool_schema: OpenAIFunctionToolSchema | dict | None):
        self.config = dict(config or {})
        if isinstance(tool_schema, dict):
            tool_schema = OpenAIFunctionToolSchema.model_validate(tool_schema)
        self.tool_schema = tool_schema  # set first: the base get_openai_tool_schema() reads it
        if self.tool_schema is None:
            self.tool_schema = self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise ValueError(
                f"{type(self).__name__} has no tool schema: give `tool_schema` in the tool YAML "
                "or override get_openai_tool_schema()"
            )
        self.name: str = self.tool_schema.function.name
        logger.debug("tool %s: %s", self.name, self.tool_schema.model_dump(exclude_unset=True, exclude_none=True))

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        """The schema shown to the model (rendered into the chat template's ``tools``)."""
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start an instance for one conversation; returns ``(instance_id, creation_response)``
        (a fresh uuid4 string when ``instance_id`` is None)."""
        return (instance_id if instance_id is not None else str(uuid4())), ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run one call with the model's decoded ``parameters``; returns
        ``(response, step_reward, metrics)``."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The reward of the instance's current state."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Free the instance's state."""
