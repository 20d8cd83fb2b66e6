"""Optimizer checks: a learning rate that is a finite number >= 0 and a divergence-guard bound >= 1.

A NaN/inf/negative ``optim.lr`` (or a string Hydra did not parse as a number) is refused before Ray
starts; ``lr=0`` stays allowed, it is the frozen-policy control run the recipes' learning tests compare
against. A huge finite lr (``1e10``) passes here: it is the divergence guard's job (the worker stops the
run after ``max_consecutive_nonfinite_steps`` skipped steps).
"""

from __future__ import annotations

import math

from omegaconf import DictConfig

from hybridrl.config.access import ACTOR, get, positive_int
from hybridrl.config.errors import ConfigProblem

__all__ = ["check_optimizers"]


def check_optimizers(config: DictConfig, use_critic: bool) -> list[ConfigProblem]:
    """Problems of the actor's (and, when a critic is used, the critic's) ``optim.lr`` and guard bound."""
    problems: list[ConfigProblem] = []
    sections = [ACTOR, "critic"] if use_critic else [ACTOR]
    for section in sections:
        _check_learning_rate(config, f"{section}.optim.lr", problems)
        if get(config, f"{section}.max_consecutive_nonfinite_steps") is not None:  # absent in a verl config
            positive_int(config, f"{section}.max_consecutive_nonfinite_steps", problems)
    return problems


def _check_learning_rate(config: DictConfig, key: str, problems: list[ConfigProblem]) -> None:
    value = get(config, key)
    if value is None:  # absent (a verl config without the section): the worker reports it
        return
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_number and math.isfinite(value) and value >= 0:
        return
    problems.append(
        ConfigProblem(
            key,
            f"the learning rate must be a finite number >= 0, got {value!r} ({type(value).__name__}).",
            f"set {key}=<a small positive float, e.g. 1e-6> (0 freezes the model).",
        )
    )
