"""verl's example interaction for GSM8K: a user who says whether the assistant's last answer is right.

``start_interaction(instance_id, ground_truth="72")`` stores the ground truth. Each ``generate_response``
scores the last assistant message with :mod:`hybridrl.utils.reward_score.gsm8k` (``strict`` mode: needs
``#### <number>``). A correct answer ends the conversation with ``"Your response is correct!"`` and
score 1.0; otherwise the user asks for another try and the conversation continues (score 0.0).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.interactions.base import BaseInteraction
from hybridrl.utils.reward_score import gsm8k

CORRECT_RESPONSE = "Your response is correct!"
RETRY_RESPONSE = "Your response is incorrect! You need to reflect on your answer and try again."


class Gsm8kInteraction(BaseInteraction):
    """Checks the assistant's GSM8K answer each turn (see the module docstring)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self._instance_dict: dict[str, dict[str, Any]] = {}

    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> str:
        if instance_id is None:
            instance_id = str(uuid4())
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        assistant_turns = [message for message in messages if message.get("role") == "assistant"]
        self._state(instance_id)["response"] = (
            (assistant_turns[-1].get("content") or "") if assistant_turns else ""
        )
        reward = await self.calculate_score(instance_id)
        if reward == 1.0:
            return True, CORRECT_RESPONSE, reward, {}
        return False, RETRY_RESPONSE, reward, {}

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        state = self._state(instance_id)
        return gsm8k.compute_score(
            state["response"], state["ground_truth"], method="strict", format_score=0.0, score=1.0
        )

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        self._state(instance_id)
        del self._instance_dict[str(instance_id)]

    def _state(self, instance_id: str | None) -> dict[str, Any]:
        if instance_id is None or instance_id not in self._instance_dict:
            raise KeyError(f"gsm8k interaction has no instance {instance_id!r}: call start_interaction first")
        return self._instance_dict[instance_id]
