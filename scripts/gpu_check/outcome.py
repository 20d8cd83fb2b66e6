"""What a check returns: a status, a one-line detail and its figures (JSON-serialisable). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUSES = ("PASS", "FAIL", "SKIP")


@dataclass
class Outcome:
    """One check's verdict.

    Attributes:
        status: ``PASS`` (the claim holds), ``FAIL`` (it does not, or the check broke) or ``SKIP`` (it cannot be
            judged here, e.g. a GPU claim on a CPU dry run; the code path may still have run).
        detail: one line for the ``STATUS check detail`` output.
        figures: numbers and facts for the JSON report.
    """

    status: str
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        self.detail = " ".join(str(self.detail).split())  # one line

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "figures": self.figures}
