"""Wall-clock timers that accumulate into a ``timing_raw`` dict (verl's ``marked_timer``/``simple_timer``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def simple_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the seconds spent inside the block to ``timing_raw[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


marked_timer = simple_timer
