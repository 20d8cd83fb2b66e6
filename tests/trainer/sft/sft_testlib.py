"""Helpers for SFT trainer tests: arithmetic SFT parquet, the torchrun command line, metrics."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_addition_pairs(out_dir: Path, num_train: int = 48, num_val: int = 12, seed: int = 0) -> Path:
    """``train.parquet`` / ``val.parquet`` with ``question`` → ``answer`` one-digit additions (verl SFT schema)."""
    rows = [{"question": f"What is {a} + {b}? Answer with just the number.", "answer": str(a + b)}
            for a in range(10) for b in range(10)]
    random.Random(seed).shuffle(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows[:num_train]), out_dir / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[num_train : num_train + num_val]), out_dir / "val.parquet")
    return out_dir


def sft_overrides(model_dir: str, data_dir: Path, ckpt_dir: Path, **extra: object) -> list[str]:
    """A short CPU run: global batch 16, micro batch 4 per rank, 6 steps, validation at 3 and 6."""
    values: dict[str, object] = {
        "data.train_files": data_dir / "train.parquet",
        "data.val_files": data_dir / "val.parquet",
        "data.train_batch_size": 16,
        "data.micro_batch_size_per_gpu": 4,
        "data.max_length": 32,
        "model.partial_pretrain": model_dir,
        "model.enable_gradient_checkpointing": False,
        "optim.lr": 1e-3,
        "trainer.total_training_steps": 6,
        "trainer.test_freq": 3,
        "trainer.logger": "[console,file]",
        "trainer.device": "cpu",
        "trainer.default_local_dir": ckpt_dir,
        "trainer.project_name": "sft-test",
        "trainer.experiment_name": "run",
    }
    values.update(extra)
    return [f"{key}={value}" for key, value in values.items()]


def run_sft_cli(nproc: int, overrides: list[str], metrics_file: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=N -m hybridrl.trainer.fsdp_sft_trainer ...`` (verl's launch)."""
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics_file), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "hybridrl.trainer.fsdp_sft_trainer", *overrides]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def read_metrics(path: Path) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        steps.setdefault(int(row["step"]), {}).update(row["data"])
    return steps


def report(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
