"""A per-step progress line with throughput and ETA, for long runs."""

from __future__ import annotations

import time


def _fmt_seconds(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class StepProgress:
    """Prints ``[progress] step 3/10 (30%) | 4.1 s/step | elapsed 0m12s | ETA 0m29s | <extras>``."""

    def __init__(self, total_steps: int, start_step: int = 0):
        self.total_steps = total_steps
        self.start_step = start_step
        self.started = time.perf_counter()

    def line(self, step: int, extras: dict[str, float] | None = None) -> str:
        elapsed = time.perf_counter() - self.started
        done = max(step - self.start_step, 1)
        per_step = elapsed / done
        eta = per_step * (self.total_steps - step)
        pct = 100.0 * step / max(self.total_steps, 1)
        parts = [f"[progress] step {step}/{self.total_steps} ({pct:.0f}%)", f"{per_step:.1f} s/step",
                 f"elapsed {_fmt_seconds(elapsed)}", f"ETA {_fmt_seconds(eta)}"]
        parts += [f"{k}={v:.3f}" for k, v in (extras or {}).items()]
        return " | ".join(parts)

    def update(self, step: int, extras: dict[str, float] | None = None) -> None:
        print(self.line(step, extras), flush=True)
