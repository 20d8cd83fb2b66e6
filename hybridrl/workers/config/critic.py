"""verl's critic configs (``verl.workers.config.critic``); defaults from the YAML's ``critic`` section
(``ppo_megatron_trainer.yaml`` for Megatron), see :mod:`hybridrl.base_config`."""

from dataclasses import field
from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass
from hybridrl.workers.config.actor import check_micro_batch
from hybridrl.workers.config.checkpoint import CheckpointConfig, McoreCheckpointConfig
from hybridrl.workers.config.engine import FSDPEngineConfig, McoreEngineConfig
from hybridrl.workers.config.optimizer import FSDPOptimizerConfig, McoreOptimizerConfig, OptimizerConfig

__all__ = ["CriticConfig", "FSDPCriticConfig", "FSDPCriticModelCfg", "McoreCriticConfig"]


@yaml_dataclass("critic.model", extra_keys=True)
class FSDPCriticModelCfg(BaseConfig):
    """The value model of the FSDP critic (``critic.model``)."""

    path: str
    tokenizer_path: str | None
    override_config: dict[str, Any]
    external_lib: str | None
    trust_remote_code: bool
    use_shm: bool
    enable_gradient_checkpointing: bool
    enable_activation_offload: bool
    use_remove_padding: bool
    fsdp_config: FSDPEngineConfig
    lora_rank: int
    lora_alpha: int
    target_modules: Any
    lora: dict[str, Any] = field(default_factory=dict)


@yaml_dataclass("critic")
class CriticConfig(BaseConfig):
    """PPO critic settings every strategy shares."""

    _mutable_fields = BaseConfig._mutable_fields | {
        "ppo_micro_batch_size_per_gpu",
        "ppo_mini_batch_size",
        "ppo_micro_batch_size",
        "engine",
        "model",
    }

    strategy: str
    enable: bool | None
    rollout_n: int
    ppo_mini_batch_size: int
    ppo_micro_batch_size: int | None
    ppo_micro_batch_size_per_gpu: int | None
    use_dynamic_bsz: bool
    ppo_max_token_len_per_gpu: int
    forward_max_token_len_per_gpu: int
    ppo_epochs: int
    shuffle: bool
    cliprange_value: float
    loss_agg_mode: str
    checkpoint: CheckpointConfig
    optim: OptimizerConfig
    ppo_infer_micro_batch_size_per_gpu: int | None = None
    ppo_infer_max_token_len_per_gpu: int = 32768
    data_loader_seed: int | None = 42
    loss_scale_factor: int | None = None
    engine: Any = field(default_factory=BaseConfig)
    model: Any = None

    def __post_init__(self) -> None:
        if not self.use_dynamic_bsz:
            check_micro_batch(
                "critic", "ppo_micro_batch_size", self.ppo_micro_batch_size, self.ppo_micro_batch_size_per_gpu
            )
            if self.ppo_micro_batch_size is not None and self.ppo_mini_batch_size % self.ppo_micro_batch_size != 0:
                raise ValueError(
                    f"[critic] ppo_mini_batch_size ({self.ppo_mini_batch_size}) must be divisible by "
                    f"ppo_micro_batch_size ({self.ppo_micro_batch_size})"
                )

    def validate(self, n_gpus: int, train_batch_size: int) -> None:
        """The critic's mini-batch fits the batch (verl's runtime check)."""
        if not self.use_dynamic_bsz and train_batch_size < self.ppo_mini_batch_size:
            raise ValueError(
                f"train_batch_size ({train_batch_size}) must be >= critic.ppo_mini_batch_size ({self.ppo_mini_batch_size})"
            )


@yaml_dataclass("critic", extra_keys=True)
class FSDPCriticConfig(CriticConfig):
    """The FSDP critic; its engine is the value model's ``fsdp_config`` (hybridrl's YAML keeps verl 0.5's layout:
    ``critic.model.fsdp_config``), carrying the critic's strategy."""

    _mutable_fields = CriticConfig._mutable_fields | {"forward_micro_batch_size", "forward_micro_batch_size_per_gpu"}

    optim: FSDPOptimizerConfig
    model: FSDPCriticModelCfg
    forward_micro_batch_size: int | None
    forward_micro_batch_size_per_gpu: int | None
    ulysses_sequence_parallel_size: int
    grad_clip: float

    def __post_init__(self) -> None:
        super().__post_init__()
        self.engine = self.model.fsdp_config
        object.__setattr__(self.engine, "strategy", self.strategy)


@yaml_dataclass("critic", config_name="ppo_megatron_trainer", extra_keys=True)
class McoreCriticConfig(CriticConfig):
    """The Megatron critic: ``megatron`` becomes its ``engine``."""

    optim: McoreOptimizerConfig
    checkpoint: McoreCheckpointConfig
    megatron: McoreEngineConfig
    nccl_timeout: int = 600

    def __post_init__(self) -> None:
        super().__post_init__()
        self.engine = self.megatron
