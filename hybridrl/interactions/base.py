"""The simulated-user interface of verl 0.5 (``verl.interactions.base.BaseInteraction``).

After each assistant turn with no tool call, the agent loop asks the conversation's interaction for the
next user turn::

    instance_id = await interaction.start_interaction(instance_id, **interaction_kwargs)
    should_terminate, response, score, extra = await interaction.generate_response(instance_id, messages)
    score = await interaction.calculate_score(instance_id)
    await interaction.finalize_interaction(instance_id)

``interaction_kwargs`` are the row's ``extra_info.interaction_kwargs`` (``name`` picks the interaction;
the rest, e.g. ``query`` and ``ground_truth``, go to ``start_interaction``). ``messages`` are the chat so
far (OpenAI dicts, the last one the assistant's); ``response`` becomes the next user message unless
``should_terminate``; ``score`` is the turn's score and ``extra`` free-form data.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

# The name of an interaction whose config has none (the registry always sets it from the YAML entry).
DEFAULT_INTERACTION_NAME = "interaction_agent"


class BaseInteraction:
    """Base class of interactions; subclasses override the async methods.

    Args:
        config: the entry's ``config`` mapping from the interaction YAML, with ``name`` set by the registry.
    """

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.name: str = config.get("name") or DEFAULT_INTERACTION_NAME

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Start the interaction of one conversation; returns its instance id (a uuid4 when None)."""
        return instance_id if instance_id is not None else str(uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """``(should_terminate, user_response, turn_score, extra)`` for the conversation so far."""
        return False, "Your current result seems acceptable.", 0.8, {}

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        """The interaction's score (turn level)."""
        return 0.0

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        """Release the conversation's state."""
