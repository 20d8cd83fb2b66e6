"""Rule-based reward scorers and verl's ``default_compute_score`` dispatch on ``data_source``.

A custom scorer has the same signature: ``compute_score(data_source, solution_str, ground_truth,
extra_info=None, **kwargs) -> float | dict`` (a dict must hold ``"score"``; its other keys are logged).
"""

from __future__ import annotations

from typing import Any

MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    sandbox_fusion_url: str | None = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: int | None = None,
) -> float | dict:
    """Score one response with the scorer registered for ``data_source``.

    ``sandbox_fusion_url``/``concurrent_semaphore`` are accepted for verl compatibility; hybridrl has no
    SandboxFusion client and always runs code locally (``memory_limit_mb`` sets the sandbox memory limit).

    Raises:
        NotImplementedError: no scorer for ``data_source`` (pass ``custom_reward_function.path``).
    """
    if data_source == "openai/gsm8k":
        from hybridrl.utils.reward_score import gsm8k

        res: Any = gsm8k.compute_score(solution_str, ground_truth)
    elif data_source in MATH_SOURCES:
        from hybridrl.utils.reward_score import math

        res = math.compute_score(solution_str, ground_truth)
    elif data_source in CODE_SOURCES:
        from hybridrl.utils.reward_score import code
        from hybridrl.utils.reward_score.sandbox import SandboxLimits

        limits = SandboxLimits(memory_mb=memory_limit_mb) if memory_limit_mb else None
        res = code.compute_score(solution_str, ground_truth, continuous=True, limits=limits)
    elif data_source == "arithmetic":
        from hybridrl.utils.reward_score import arithmetic

        res = arithmetic.compute_score(solution_str, ground_truth)
    elif data_source == "countdown":
        from hybridrl.utils.reward_score import countdown

        res = countdown.compute_score(solution_str, ground_truth)
    elif data_source == "shapes":
        from hybridrl.utils.reward_score import shapes

        res = shapes.compute_score(solution_str, ground_truth)
    else:
        raise NotImplementedError(
            f"Reward function is not implemented for {data_source=}. Known data sources: openai/gsm8k, "
            f"{', '.join(MATH_SOURCES)}, {', '.join(CODE_SOURCES)}, arithmetic, countdown, shapes. "
            "For other data, set custom_reward_function.path=<file.py> custom_reward_function.name=<function>."
        )
    if isinstance(res, dict):
        return res
    if isinstance(res, (int, float, bool)):
        return float(res)
    return float(res[0])


# verl's deprecated alias.
_default_compute_score = default_compute_score

__all__ = ["default_compute_score", "_default_compute_score"]
