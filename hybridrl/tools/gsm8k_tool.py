"""verl's example tool ``calc_gsm8k_reward``: the model submits its GSM8K answer and hears whether it is right.

Per instance it keeps the last submitted answer, the ground truth and the best reward so far.
``execute({"answer": "72"})`` stores ``"#### 72"``, scores it with :mod:`hybridrl.utils.reward_score.gsm8k`
(``flexible`` mode: the last number in the text, 1.0 if equal to the ground truth else 0.0) and answers
``"Current parsed answer='72' reward=1.0"``. The step reward is 0.0 when the submission beats the previous
best and -0.05 otherwise (verl's penalty for resubmitting without improving).

The ground truth comes from ``extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth``:
``create(ground_truth=...)`` (verl 0.5) or ``create(create_kwargs={"ground_truth": ...})`` (verl 0.9).
The schema is given in the tool YAML (examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from hybridrl.utils.reward_score import gsm8k

# verl's penalty for a submission that does not improve on the best reward so far.
NON_IMPROVING_SUBMISSION_PENALTY = -0.05


class Gsm8kTool(BaseTool):
    """Checks a GSM8K answer against the instance's ground truth (see the module docstring)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema):
        super().__init__(config, tool_schema)
        self._instance_dict: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        if instance_id is None:
            instance_id = str(uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        answer = parameters.get("answer", "")
        if not isinstance(answer, str):
            answer = str(answer)
        state = self._instance_dict[instance_id]
        state["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NON_IMPROVING_SUBMISSION_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed {answer=} {reward=}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instance_dict[instance_id]
        return gsm8k.compute_score(
            state["response"], state["ground_truth"], method="flexible", format_score=0.0, score=1.0
        )

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        del self._instance_dict[instance_id]
