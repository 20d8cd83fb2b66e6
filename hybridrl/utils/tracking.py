"""Experiment tracking: one ``Tracking`` object fans each metrics dict out to the chosen backends.

Backends (``trainer.logger``): ``console`` (verl's ``step:N - key:value - ...`` line), ``tensorboard``
(real event files under ``$TENSORBOARD_DIR`` or ``tensorboard_log/{project}/{experiment}``), ``wandb``
(falls back to offline mode with a one-line notice when no API key is configured, so a default config
never hangs on a login prompt), ``mlflow`` (verl's local SQLite store ``/tmp/mlruns.db`` unless ``MLFLOW_TRACKING_URI`` is set) and
``file`` (JSONL at ``$VERL_FILE_LOGGER_PATH`` or ``{$VERL_FILE_LOGGER_ROOT or .}/{project}/{experiment}.jsonl``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable
from typing import Any, Protocol

SUPPORTED_BACKENDS = ("console", "tensorboard", "wandb", "mlflow", "file")


class _Backend(Protocol):
    def log(self, data: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


def _numeric_items(data: dict[str, Any]) -> Iterable[tuple[str, float]]:
    for key, value in data.items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, (int, float)):
            yield key, value


def format_console_line(data: dict[str, Any], step: int) -> str:
    """verl's console format: ``step:3 - actor/pg_loss:0.123 - training/global_step:3.000 - ...`` (numbers only,
    every one with 3 decimals as verl's ``concat_dict_to_str``; the step itself is an int)."""
    parts = [f"step:{step}"]
    for key, value in _numeric_items(data):
        parts.append(f"{key}:{value:.3f}")
    return " - ".join(parts)


class ConsoleBackend:
    def log(self, data: dict[str, float], step: int) -> None:
        print(format_console_line(data, step), flush=True)

    def finish(self) -> None:
        pass


class TensorboardBackend:
    def __init__(self, project: str, experiment: str):
        from torch.utils.tensorboard import SummaryWriter

        log_dir = os.environ.get("TENSORBOARD_DIR", os.path.join("tensorboard_log", project, experiment))
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir)

    def log(self, data: dict[str, float], step: int) -> None:
        for key, value in _numeric_items(data):
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


def _wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in ("offline", "disabled"):
        return True
    netrc = os.path.expanduser("~/.netrc")
    return os.path.exists(netrc) and "api.wandb.ai" in open(netrc, encoding="utf-8").read()


class WandbBackend:
    def __init__(self, project: str, experiment: str, config: dict | None):
        import wandb

        if not _wandb_has_credentials():
            print("[tracking] wandb: no API key found (WANDB_API_KEY / ~/.netrc); logging offline to ./wandb", flush=True)
            os.environ["WANDB_MODE"] = "offline"
        self.run = wandb.init(project=project, name=experiment, config=config, entity=os.environ.get("WANDB_ENTITY"))

    def log(self, data: dict[str, float], step: int) -> None:
        self.run.log(dict(_numeric_items(data)), step=step)

    def finish(self) -> None:
        self.run.finish()


class MlflowBackend:
    def __init__(self, project: str, experiment: str, config: dict | None):
        import mlflow

        uri = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:////tmp/mlruns.db")  # verl's default store
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(project)
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_id=os.environ.get("MLFLOW_RUN_ID"), run_name=experiment)
        if config:
            flat = _flatten(config)
            mlflow.log_params({k[:250]: str(v)[:500] for k, v in list(flat.items())[:100]})

    def log(self, data: dict[str, float], step: int) -> None:
        clean = {_mlflow_key(k): v for k, v in _numeric_items(data) if math.isfinite(v)}
        self.mlflow.log_metrics(clean, step=step)

    def finish(self) -> None:
        self.mlflow.end_run()


def _mlflow_key(key: str) -> str:
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key.replace("@", "_at_"))


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


class FileBackend:
    def __init__(self, project: str, experiment: str):
        path = os.environ.get("VERL_FILE_LOGGER_PATH")
        if not path:
            root = os.environ.get("VERL_FILE_LOGGER_ROOT", ".")
            path = os.path.join(root, project, f"{experiment}.jsonl")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self.fp = open(path, "a", encoding="utf-8")

    def log(self, data: dict[str, float], step: int) -> None:
        self.fp.write(json.dumps({"step": step, "data": dict(_numeric_items(data))}) + "\n")
        self.fp.flush()

    def finish(self) -> None:
        self.fp.close()


class Tracking:
    """Fan metrics out to every backend named in ``default_backend`` (a name or a list of names)."""

    def __init__(self, project_name: str, experiment_name: str, default_backend: str | list[str] = "console",
                 config: dict | None = None):
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        backends = ["wandb" if b == "tracking" else b for b in backends]
        unknown = [b for b in backends if b not in SUPPORTED_BACKENDS]
        if unknown:
            raise ValueError(f"trainer.logger: unsupported backend(s) {unknown}; supported: {list(SUPPORTED_BACKENDS)}")
        factories = {
            "console": lambda: ConsoleBackend(),
            "tensorboard": lambda: TensorboardBackend(project_name, experiment_name),
            "wandb": lambda: WandbBackend(project_name, experiment_name, config),
            "mlflow": lambda: MlflowBackend(project_name, experiment_name, config),
            "file": lambda: FileBackend(project_name, experiment_name),
        }
        self.logger: dict[str, _Backend] = {name: factories[name]() for name in dict.fromkeys(backends)}

    def log(self, data: dict[str, Any], step: int, backend: str | list[str] | None = None) -> None:
        for name, sink in self.logger.items():
            if backend is None or name in (backend if isinstance(backend, list) else [backend]):
                sink.log(data, step)

    def finish(self) -> None:
        for sink in self.logger.values():
            try:
                sink.finish()
            except Exception as err:  # finishing must never mask the run's own outcome
                print(f"[tracking] finishing {type(sink).__name__} failed: {err}", file=sys.stderr)
        self.logger = {}


class ValidationGenerationsLogger:
    """Log (input, output, score) samples of a validation run to the backends that can show text."""

    def log(self, tracking: Tracking, samples: list[tuple[str, str, float]], step: int) -> None:
        if not samples:
            return
        text = "\n\n".join(f"**input** {i}\n\n**output** {o}\n\n**score** {s}" for i, o, s in samples)
        tb = tracking.logger.get("tensorboard")
        if isinstance(tb, TensorboardBackend):
            tb.writer.add_text("val/generations", text, step)
        wb = tracking.logger.get("wandb")
        if isinstance(wb, WandbBackend):
            import wandb

            table = wandb.Table(columns=["step", "input", "output", "score"], data=[[step, *s] for s in samples])
            wb.run.log({"val/generations": table}, step=step)
        mf = tracking.logger.get("mlflow")
        if isinstance(mf, MlflowBackend):
            mf.mlflow.log_dict({"samples": [list(s) for s in samples]}, f"val_step{step}.json")
