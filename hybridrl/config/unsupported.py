"""Keys whose feature hybridrl does not implement yet: the ONE table to edit when a feature lands.

``error`` rows change what is trained (a run would silently differ from verl): a non-default value
is a ConfigError. ``warn`` rows only affect speed or a backend we lack: a one-time warning, and the
run goes on without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from hybridrl.config.access import get
from hybridrl.config.errors import ConfigProblem, warn_once


@dataclass(frozen=True)
class Unsupported:
    """One row: the key, when its value is unsupported, error or warn, and what happens / what to do."""

    key: str
    active: Callable[[Any], bool]
    severity: str  # "error" | "warn"
    note: str


def _above(limit: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, (int, float)) and value > limit


def _is_true(value: Any) -> bool:
    return value is True


def _is_set(value: Any) -> bool:
    return value is not None


_SHM = "loading through /dev/shm is not implemented; files are read directly."

# fmt: off
UNSUPPORTED: dict[str, tuple[Unsupported, ...]] = {
    "ppo_trainer": (
        Unsupported("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template", _is_true, "error", "hybridrl trains on the tokens the engine generated (token-in/token-out); re-rendering earlier turns is not supported: set it to False."),
        Unsupported("actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts", _is_set, "error", "verl does not read it either: use actor_rollout_ref.rollout.n."),
        Unsupported("actor_rollout_ref.rollout.multi_turn.completion_callback", _is_set, "error", "verl 0.5's chat-scheduler callback is not supported: write an agent loop (@register) instead."),
        Unsupported("actor_rollout_ref.rollout.trace.backend", _is_set, "warn", "rollout tracing (weave/mlflow) is not implemented; no traces are written."),
        Unsupported("actor_rollout_ref.rollout.agent.custom_async_server.path", _is_set, "error", "custom async servers are not supported: hybridrl's hf/vllm/sglang servers run in the rollout workers."),
        Unsupported("reward_model.sandbox_fusion.url", _is_set, "error", "Sandbox Fusion code rewards are not supported yet; set it to null."),
        Unsupported("actor_rollout_ref.model.use_liger", _is_true, "warn", "Liger kernels are not implemented; plain PyTorch is used."),
        Unsupported("actor_rollout_ref.model.use_fused_kernels", _is_true, "warn", "fused kernels are not implemented; plain PyTorch is used."),
        Unsupported("data.use_shm", _is_true, "warn", _SHM),
        Unsupported("actor_rollout_ref.model.use_shm", _is_true, "warn",
                    "the model is read from its path (only vLLM's LoRA adapter folders go through /dev/shm)."),
        Unsupported("critic.model.use_shm", _is_true, "warn", _SHM),
        Unsupported("reward_model.model.use_shm", _is_true, "warn", _SHM),
        Unsupported("actor_rollout_ref.rollout.multi_stage_wake_up", _is_true, "warn", "staged wake-up is not implemented; the engine wakes in one step."),
        Unsupported("trainer.profile_steps", _is_set, "warn", "nsys/NPU profiling is not implemented; no profile is written."),
        Unsupported("trainer.default_hdfs_dir", _is_set, "warn", "HDFS is not available; checkpoints stay in trainer.default_local_dir."),
    ),
    "sft_trainer": (
        Unsupported("model.use_liger", _is_true, "warn", "Liger kernels are not implemented; plain PyTorch is used."),
        Unsupported("data.use_shm", _is_true, "warn", _SHM),
        Unsupported("model.use_shm", _is_true, "warn", _SHM),
        Unsupported("trainer.default_hdfs_dir", _is_set, "warn", "HDFS is not available; checkpoints stay local."),
    ),
}
# fmt: on


def check_unsupported(config: DictConfig, config_name: str = "ppo_trainer") -> list[ConfigProblem]:
    """Problems for ``error`` rows whose value is active; ``warn`` rows are warned about once."""
    problems: list[ConfigProblem] = []
    for row in UNSUPPORTED.get(config_name, ()):
        value = get(config, row.key)
        if not row.active(value):
            continue
        if row.severity == "error":
            problems.append(ConfigProblem(row.key, f"{value!r} is not supported yet.", row.note))
        else:
            warn_once(f"{row.key}={value!r} is ignored: {row.note}")
    return problems
