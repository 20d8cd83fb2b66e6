"""Check ``sft``: the SFT trainer under torchrun on one rank, FSDP2, NCCL and bf16 on the GPU (gloo, fp32 on CPU).

    python -m torch.distributed.run --standalone --nproc_per_node=1 -m gpu_check.bare_machine \
        hybridrl.trainer.fsdp_sft_trainer data.train_files=... model.partial_pretrain=<tiny model> trainer.device=cuda

(``gpu_check.bare_machine`` runs the trainer's own ``__main__`` after blocking Ray/vLLM in a dry run.) On CUDA the
trainer's FSDP2 mixed precision is verl's default, bf16 compute with fp32 reduction; the process group is
``cpu:gloo,cuda:nccl``. PASS: exit 0 and every step's ``train/loss`` finite; the detail says whether it fell.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpu_check.outcome import Outcome
from gpu_check.workload import model_dir, sizes_for, write_sft_data


def sft_command(model_path: str, data_dir: Path, run_dir: Path, device: str, steps: int) -> list[str]:
    overrides = {
        "data.train_files": data_dir / "train.parquet",
        "data.val_files": data_dir / "val.parquet",
        "data.train_batch_size": 8,
        "data.micro_batch_size_per_gpu": 4,
        "data.max_length": 64,
        "model.partial_pretrain": model_path,
        "model.enable_gradient_checkpointing": False,
        "optim.lr": 1e-3,
        "optim.lr_scheduler": "constant",
        "trainer.total_training_steps": steps,
        "trainer.logger": "[console,file]",
        "trainer.device": device,
        "trainer.n_gpus_per_node": 1,
        "trainer.default_local_dir": run_dir / "ckpt",
        "trainer.project_name": "gpu_check",
        "trainer.experiment_name": "sft",
    }
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    trainer = ["-m", "gpu_check.bare_machine", "hybridrl.trainer.fsdp_sft_trainer"]
    return [*launcher, *trainer, *[f"{key}={value}" for key, value in overrides.items()]]


def read_losses(metrics_file: Path) -> list[float]:
    """``train/loss`` per step from the file logger's JSONL (``{"step": n, "data": {...}}`` per line)."""
    by_step: dict[int, float] = {}
    for line in metrics_file.read_text().splitlines():
        row = json.loads(line)
        if "train/loss" in row["data"]:
            by_step[int(row["step"])] = float(row["data"]["train/loss"])
    return [by_step[step] for step in sorted(by_step)]


def run(context: dict[str, Any]) -> Outcome:
    run_dir = Path(context["workdir"]) / "sft"
    data_dir = write_sft_data(run_dir / "data")
    metrics_file = run_dir / "metrics.jsonl"
    metrics_file.unlink(missing_ok=True)
    steps = sizes_for(context).sft_steps
    command = sft_command(model_dir(context), data_dir, run_dir, context["device"], steps)
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(metrics_file))
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-6000:], sep="\n", flush=True)
    losses = read_losses(metrics_file) if metrics_file.exists() else []
    figures = {"returncode": proc.returncode, "losses": losses, "steps": steps, "device": context["device"],
               "precision": "bf16 compute, fp32 reduce" if context["device"] == "cuda" else "fp32"}  # fmt: skip
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return Outcome("FAIL", f"torchrun exit {proc.returncode}: {tail[:300]}", figures)
    if len(losses) != steps or not all(math.isfinite(loss) for loss in losses):
        return Outcome("FAIL", f"losses {losses} (expected {steps} finite values)", figures)
    figures["loss_decreased"] = losses[-1] < losses[0]
    trend = "fell" if figures["loss_decreased"] else "did not fall"
    backend = "nccl, bf16" if context["device"] == "cuda" else "gloo, fp32 (dry run)"
    return Outcome("PASS", f"torchrun 1 rank FSDP2 {backend}: loss {losses[0]:.3f} -> {losses[-1]:.3f} ({trend}, "
                           f"{steps} steps, all finite)", figures)  # fmt: skip
