"""Peak resident memory of every process a benchmark starts (its subprocesses and theirs, Ray workers included).

The kernel keeps each process's high-water mark of resident memory (``VmHWM`` in ``/proc/<pid>/status``), so
polling it is exact as long as a process is read at least once after its peak and before it exits: a
sampler thread reads every descendant of this process every ``interval_s`` seconds and keeps, per pid,
the largest ``VmHWM`` seen and the process's last title (Ray actors rename themselves ``ray::<Actor>.<method>``,
e.g. ``ray::WorkerDict.actor_rollout_generate_sequences``). A process that peaks and exits between two reads is
recorded with its last value; the benchmarked ones (trainer, workers) live for the whole run. Linux only:
elsewhere the sampler falls back to ``psutil``'s current RSS (a lower bound of the peak).

    with PeakMemory() as mem:
        subprocess.run(...)
    mem.processes()  # [{"pid", "title", "peak_rss_gb"}, ...], largest first
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_GIB = 1024**3


def vm_hwm_bytes(pid: int) -> int | None:
    """The process's peak resident set (``VmHWM``) in bytes, or None when ``/proc`` cannot tell."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_title(proc: Any) -> str:
    """``ray::Actor.method`` for a Ray worker (its process title), else the command line, shortened."""
    try:
        cmdline = proc.cmdline()
    except Exception:  # the process exited or is not ours to read
        return ""
    text = " ".join(cmdline) if cmdline else proc.name()
    return text[:160]


class PeakMemory:
    """Context manager: a daemon thread polling the peak RSS of all descendants of this process."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.peaks: dict[int, int] = {}
        self.titles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        self._thread = threading.Thread(target=self._run, daemon=True, name="peak-memory")
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            self.sample(me)
            self._stop.wait(self.interval_s)

    def sample(self, root: Any) -> None:
        """One read of every descendant of ``root`` (a ``psutil.Process``)."""
        try:
            children = root.children(recursive=True)
        except Exception:
            return
        for proc in children:
            peak = vm_hwm_bytes(proc.pid)
            if peak is None:
                try:
                    peak = proc.memory_info().rss
                except Exception:
                    continue
            if peak >= self.peaks.get(proc.pid, 0):
                self.peaks[proc.pid] = peak
            title = process_title(proc)
            if title:
                self.titles[proc.pid] = title

    def processes(self) -> list[dict[str, Any]]:
        """``[{"pid", "title", "peak_rss_gb"}]`` of every process seen, largest peak first."""
        rows = [{"pid": pid, "title": self.titles.get(pid, ""), "peak_rss_gb": peak / _GIB}
                for pid, peak in self.peaks.items()]
        return sorted(rows, key=lambda row: -row["peak_rss_gb"])


def worker_peak_gb(processes: list[dict[str, Any]], marker: str) -> float | None:
    """Largest peak among processes whose title contains ``marker`` (e.g. ``ray::WorkerDict``), or None."""
    peaks = [row["peak_rss_gb"] for row in processes if marker in row["title"]]
    return max(peaks) if peaks else None
