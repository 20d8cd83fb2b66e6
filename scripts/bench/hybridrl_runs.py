"""Run hybridrl's ``main_ppo`` (GRPO on the quickstart's arithmetic task) as a subprocess and read its metrics.

Shared by ``bench_controller.py`` (1 vs 2 workers) and ``bench_grpo_vs_trl.py`` (hybridrl vs TRL). The
Hydra overrides are those of ``examples/quickstart/run_quickstart.sh`` (hf rollout, FSDP2 actor over
gloo, no reference model, one on-policy update per step); the per-step metrics come from the ``file``
logger's JSONL (``VERL_FILE_LOGGER_PATH``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
DEFAULT_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hybridrl")


def load_script(name: str, path: Path) -> Any:
    """A script as a module (``examples/`` and ``scripts/`` are not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def quickstart_assets(model: str, cache_dir: str = DEFAULT_CACHE) -> tuple[str, str]:
    """``(model_dir, data_dir)``: ``tiny`` (hybridrl's tiny Qwen2, built once) or ``smollm2`` (the quickstart's
    prepared SmolLM2-135M-Instruct), and the quickstart's 2-digit addition parquet files."""
    if model == "tiny":
        from hybridrl.models.tiny import build_tiny_model

        model_dir = str(build_tiny_model(Path(cache_dir) / "bench_tiny_qwen2"))
    elif model == "smollm2":
        model_dir = str(load_script("qs_prepare_model", QUICKSTART / "prepare_model.py").prepare(cache_dir))
    else:
        raise ValueError(f"model {model!r}: use 'tiny' or 'smollm2'")
    data_dir = load_script("qs_make_data", QUICKSTART / "make_data.py").make_data(
        Path(cache_dir) / "data" / "arithmetic_2digit_add"
    )
    return model_dir, str(data_dir)


@dataclass
class GRPOShape:
    """The settings both GRPO implementations share (one step = ``prompts × n`` completions)."""

    prompts: int = 4
    n: int = 8
    response_length: int = 16
    prompt_length: int = 64
    lr: float = 1e-5
    weight_decay: float = 0.0
    grad_ckpt: bool = False
    micro: int = 16
    seed: int = 1
    recompute_old_log_prob: bool = False  # hybridrl only: False skips the on-policy old-log-prob forward (as TRL)
    share_prompt_prefix: bool = True  # hybridrl only: each distinct prompt runs once in the update (the quickstart's)

    @property
    def samples_per_step(self) -> int:
        return self.prompts * self.n


def main_ppo_overrides(model_dir: str, data_dir: str, shape: GRPOShape, steps: int, workers: int, out_dir: str,
                       val_every: int = 0, extra: dict[str, Any] | None = None) -> list[str]:
    """Hydra overrides of ``run_quickstart.sh`` for ``steps`` steps on ``workers`` CPU workers.

    ``val_every > 0`` validates (greedy, held-out) before training and every ``val_every`` steps.
    """
    args: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "data.train_files": f"{data_dir}/train.parquet",
        "data.val_files": f"{data_dir}/test.parquet",
        "data.train_batch_size": shape.prompts,
        "data.max_prompt_length": shape.prompt_length,
        "data.max_response_length": shape.response_length,
        "data.dataloader_num_workers": 0,
        "data.seed": shape.seed,
        "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.model.use_remove_padding": False,
        "actor_rollout_ref.model.share_prompt_prefix": shape.share_prompt_prefix,
        "actor_rollout_ref.model.enable_gradient_checkpointing": shape.grad_ckpt,
        "actor_rollout_ref.actor.optim.lr": shape.lr,
        "actor_rollout_ref.actor.optim.weight_decay": shape.weight_decay,
        "actor_rollout_ref.actor.ppo_mini_batch_size": shape.prompts,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": shape.micro,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "actor_rollout_ref.actor.recompute_old_log_prob": shape.recompute_old_log_prob,
        "actor_rollout_ref.rollout.name": "hf",
        "actor_rollout_ref.rollout.mode": "sync",
        "actor_rollout_ref.rollout.calculate_log_probs": False,
        "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.n": shape.n,
        "actor_rollout_ref.rollout.temperature": 1.0,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": shape.micro,
        "+actor_rollout_ref.rollout.seed": shape.seed,
        "trainer.device": "cpu",
        "trainer.n_gpus_per_node": workers,
        "trainer.nnodes": 1,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": steps,
        "trainer.val_before_train": val_every > 0,
        "trainer.test_freq": val_every if val_every > 0 else -1,
        "trainer.save_freq": -1,
        "trainer.logger": "[console,file]",
        "trainer.project_name": "hybridrl_bench",
        "trainer.experiment_name": f"grpo_w{workers}",
        "trainer.default_local_dir": f"{out_dir}/checkpoints",
    }
    args.update(extra or {})
    return [f"{key}={value}" for key, value in args.items()]


@dataclass
class PPORun:
    """A finished ``main_ppo`` subprocess: exit code, wall time, per-step metrics and the output tail."""

    returncode: int
    wall_s: float
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    tail: str = ""

    def series(self, key: str) -> dict[int, float]:
        """``step → metrics[key]`` for the steps that logged ``key``."""
        return {step: data[key] for step, data in sorted(self.metrics.items()) if key in data}

    def stage_medians(self, first_step: int = 2) -> dict[str, float]:
        """Median of every ``timing_s/<stage>`` over the steps from ``first_step`` on (warm-up dropped)."""
        import statistics

        kept = [data for step, data in self.metrics.items() if step >= first_step] or list(self.metrics.values())
        keys = sorted({key for data in kept for key in data if key.startswith("timing_s/")})
        return {key.removeprefix("timing_s/"): statistics.median(d[key] for d in kept if key in d) for key in keys}

    def train_step_seconds(self) -> dict[int, float]:
        """``timing_s/step`` minus validation and checkpoint time (both run inside verl's step timer)."""
        out = {}
        for step, data in sorted(self.metrics.items()):
            if "timing_s/step" in data:
                excluded = data.get("timing_s/testing", 0.0) + data.get("timing_s/save_checkpoint", 0.0)
                out[step] = data["timing_s/step"] - excluded
        return out


def read_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """Step → metrics from the file logger's JSONL (later lines of a step are merged in)."""
    steps: dict[int, dict[str, float]] = {}
    if not Path(path).exists():
        return steps
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            steps.setdefault(int(row["step"]), {}).update(row["data"])
    return steps


def run_main_ppo(overrides: list[str], out_dir: str, threads: int, timeout_s: float = 3600) -> PPORun:
    """``python -m hybridrl.trainer.main_ppo overrides`` with ``OMP_NUM_THREADS=threads`` per worker."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    metrics_file = Path(out_dir) / "metrics.jsonl"
    metrics_file.unlink(missing_ok=True)
    env = {
        **os.environ,
        "VERL_FILE_LOGGER_PATH": str(metrics_file),
        "OMP_NUM_THREADS": str(threads),
        "RAY_DEDUP_LOGS": "0",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hybridrl.trainer.main_ppo", *overrides], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout_s)
    wall_s = time.perf_counter() - start
    tail = (proc.stdout[-2000:] + "\n--- stderr ---\n" + proc.stderr[-4000:]) if proc.returncode else ""
    return PPORun(proc.returncode, wall_s, read_metrics(metrics_file), tail)
