"""One error that lists every configuration problem found, each with its dotted key and a fix."""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigProblem:
    """A single problem: the dotted key at fault, what is wrong, and how to fix it."""

    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message} Fix: {self.fix}"


class ConfigError(ValueError):
    """Raised with all problems at once; ``problems`` keeps them for callers and tests."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = list(problems)
        count = len(self.problems)
        lines = [f"{count} configuration problem{'s' if count != 1 else ''}:"]
        lines += [f"  - {problem}" for problem in self.problems]
        super().__init__("\n".join(lines))


class ConfigWarning(UserWarning):
    """A setting that is accepted but ignored or deprecated."""


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Emit ``message`` as a :class:`ConfigWarning`, at most once per process."""
    if message in _warned:
        return
    _warned.add(message)
    warnings.warn(message, ConfigWarning, stacklevel=3)
