"""verl's general trainer configs (``verl.trainer.config.config``): ``CheckpointConfig`` (defined with the worker
configs, which use it, and re-exported here), ``ProfileConfig``, ``BaseModelConfig``, ``ModuleConfig``."""

from dataclasses import field
from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass
from hybridrl.workers.config.checkpoint import CheckpointConfig

__all__ = ["BaseModelConfig", "CheckpointConfig", "ModuleConfig", "ProfileConfig"]


@yaml_dataclass("trainer.profile")
class ProfileConfig(BaseConfig):
    """Which ranks and steps to profile, and where the traces go."""

    profile_ranks: list[int] | None = None
    step_start: int = -1
    step_end: int = -1
    save_path: str | None = None


@yaml_dataclass("actor_rollout_ref.model")
class BaseModelConfig(BaseConfig):
    """A pretrained checkpoint to load: path, tokenizer, HF config overrides, custom code, LoRA."""

    path: str
    override_config: dict[str, Any]
    external_lib: str | None
    trust_remote_code: bool
    tokenizer_path: str | None = None
    lora: dict[str, Any] = field(default_factory=dict)


@yaml_dataclass("reward.reward_manager.module")
class ModuleConfig(BaseConfig):
    """A Python module to load: a file ``path`` and/or an importable ``name``."""

    path: str | None = None
    name: str | None = None
