"""Run a recipe's CPU script (hybridrl/recipes/<name>/run_*_cpu.sh) the way a user does, on the test's model
and data."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "hybridrl" / "recipes"


def run_recipe_script(script: str, model_dir: str, data_dir: str, tmp_path: Path, *overrides: str,
                      timeout: float = 600) -> tuple[subprocess.CompletedProcess, Path]:
    """``bash hybridrl/recipes/<script> <overrides>``; returns the process and its JSONL metrics file."""
    metrics_file = tmp_path / "metrics.jsonl"
    env = {**os.environ, "MODEL_PATH": model_dir, "DATA_DIR": data_dir, "WORK_DIR": str(tmp_path / "work"),
           "VERL_FILE_LOGGER_PATH": str(metrics_file), "HF_HUB_OFFLINE": "1",
           "RAY_DEDUP_LOGS": "0"}
    args = ["trainer.logger=[console,file]", f"trainer.default_local_dir={tmp_path / 'ckpt'}", *overrides]
    proc = subprocess.run(["bash", str(RECIPES / script), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc, metrics_file
