"""verl's checkpoint configs (``CheckpointConfig`` of ``verl.trainer.config``, ``McoreCheckpointConfig`` of
``verl.workers.config``); defaults from the YAML's ``actor.checkpoint``."""

from dataclasses import field
from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass

__all__ = ["CheckpointConfig", "McoreCheckpointConfig"]

CHECKPOINT_PATH = "actor_rollout_ref.actor.checkpoint"


@yaml_dataclass(CHECKPOINT_PATH, extra_keys=True)
class CheckpointConfig(BaseConfig):
    """What a checkpoint saves and loads: any of ``model``, ``optimizer``, ``extra``, ``hf_model``."""

    save_contents: list[str]
    load_contents: list[str]
    async_save: bool = False
    strict: bool = True
    save_lora_only: bool = False


@yaml_dataclass(CHECKPOINT_PATH, config_name="ppo_megatron_trainer", extra_keys=True)
class McoreCheckpointConfig(CheckpointConfig):
    """Megatron's checkpoint config: ``mbridge_config`` options on top."""

    mbridge_config: dict[str, Any] = field(default_factory=dict)
