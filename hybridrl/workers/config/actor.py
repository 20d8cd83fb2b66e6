"""verl's actor configs (``verl.workers.config.actor``): ``ActorConfig`` and its FSDP / Megatron forms,
``PolicyLossConfig``, ``RouterReplayConfig``.

Defaults from the YAML's ``actor_rollout_ref.actor`` (``ppo_megatron_trainer.yaml`` for Megatron), see
:mod:`hybridrl.base_config`. ``__post_init__`` checks what verl checks at construction (micro-batch settings,
``loss_agg_mode``); ``validate(n_gpus, train_batch_size, model_config)`` what needs the run's sizes.
"""

from dataclasses import field
from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass
from hybridrl.workers.config.checkpoint import CheckpointConfig, McoreCheckpointConfig
from hybridrl.workers.config.engine import FSDPEngineConfig, McoreEngineConfig, check_router_replay_mode
from hybridrl.workers.config.optimizer import FSDPOptimizerConfig, McoreOptimizerConfig, OptimizerConfig
from hybridrl.workers.config.rollout_corr import RolloutCorrectionConfig

__all__ = [
    "ActorConfig",
    "FSDPActorConfig",
    "McoreActorConfig",
    "PolicyLossConfig",
    "RouterReplayConfig",
]

ACTOR_PATH = "actor_rollout_ref.actor"
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def check_micro_batch(section: str, param: str, per_sample: int | None, per_gpu: int | None) -> None:
    """Exactly one of the deprecated ``<param>`` and ``<param>_per_gpu`` is set (verl's messages)."""
    if per_sample is not None and per_gpu is not None:
        raise ValueError(
            f"[{section}] You have set both '{section}.{param}' AND '{section}.{param}_per_gpu'. Please remove "
            f"'{section}.{param}' because only '*_{param}_per_gpu' is supported (the former is deprecated)."
        )
    if per_sample is None and per_gpu is None:
        raise ValueError(
            f"[{section}] Please set at least one of '{section}.{param}' or '{section}.{param}_per_gpu' "
            "if use_dynamic_bsz is not enabled."
        )


@yaml_dataclass(f"{ACTOR_PATH}.router_replay")
class RouterReplayConfig(BaseConfig):
    """MoE routing replay of the actor: ``disabled`` | ``R2`` | ``R3``."""

    mode: str = "disabled"
    record_file: str | None = None
    replay_file: str | None = None

    def __post_init__(self) -> None:
        check_router_replay_mode(self.mode)


@yaml_dataclass(f"{ACTOR_PATH}.policy_loss", extra_keys=True)
class PolicyLossConfig(BaseConfig):
    """The registered policy loss (``loss_mode``) and its parameters."""

    loss_mode: str
    clip_cov_ratio: float
    clip_cov_lb: float
    clip_cov_ub: float
    kl_cov_ratio: float
    ppo_kl_coef: float
    dro_beta: float | None = None
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


@yaml_dataclass(ACTOR_PATH)
class ActorConfig(BaseConfig):
    """PPO actor settings every strategy shares."""

    _mutable_fields = BaseConfig._mutable_fields | {
        "ppo_mini_batch_size",
        "ppo_micro_batch_size",
        "ppo_micro_batch_size_per_gpu",
        "ppo_infer_micro_batch_size_per_gpu",
        "engine",
        "model_config",
    }

    strategy: str
    ppo_mini_batch_size: int
    ppo_micro_batch_size: int | None
    ppo_micro_batch_size_per_gpu: int | None
    use_dynamic_bsz: bool
    ppo_max_token_len_per_gpu: int
    clip_ratio: float
    clip_ratio_low: float
    clip_ratio_high: float
    policy_loss: PolicyLossConfig
    clip_ratio_c: float
    loss_agg_mode: str
    loss_scale_factor: int | None
    entropy_coeff: float
    use_kl_loss: bool
    use_torch_compile: bool
    kl_loss_coef: float
    kl_loss_type: str
    ppo_epochs: int
    shuffle: bool
    checkpoint: CheckpointConfig
    optim: OptimizerConfig
    ppo_infer_micro_batch_size_per_gpu: int | None = None
    ppo_infer_max_token_len_per_gpu: int = 16384
    freeze_vision_tower: bool = False
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    calculate_entropy: bool = False
    calculate_sum_pi_squared: bool = False
    use_prefix_grouper: bool = False
    data_loader_seed: int | None = 42
    use_fused_kernels: bool = False
    engine: Any = field(default_factory=BaseConfig)
    rollout_n: int = 1  # set from rollout.n by the trainer; verl's YAML interpolates it the same way
    model_config: Any = field(default_factory=BaseConfig)
    router_replay: RouterReplayConfig = field(default_factory=RouterReplayConfig)
    global_batch_info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.use_dynamic_bsz:
            check_micro_batch(
                "actor", "ppo_micro_batch_size", self.ppo_micro_batch_size, self.ppo_micro_batch_size_per_gpu
            )
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"Invalid loss_agg_mode: {self.loss_agg_mode!r}; use one of {LOSS_AGG_MODES}")

    def _sequence_parallel_size(self) -> int:
        """Ranks one sample is split over (1: no sequence parallelism in this strategy's config)."""
        return 1

    def validate(self, n_gpus: int, train_batch_size: int, model_config: dict | None = None) -> None:
        """Checks that need the run's sizes (verl's): the mini-batch fits the batch, micro-batches divide it."""
        if self.use_dynamic_bsz:
            return
        if train_batch_size < self.ppo_mini_batch_size:
            raise ValueError(
                f"train_batch_size ({train_batch_size}) must be >= actor.ppo_mini_batch_size ({self.ppo_mini_batch_size})"
            )
        sp_size = self._sequence_parallel_size()
        if self.ppo_micro_batch_size is not None:
            if self.ppo_mini_batch_size % self.ppo_micro_batch_size != 0:
                raise ValueError(
                    f"ppo_mini_batch_size ({self.ppo_mini_batch_size}) must be divisible by "
                    f"ppo_micro_batch_size ({self.ppo_micro_batch_size})"
                )
            if self.ppo_micro_batch_size * sp_size < n_gpus:
                raise ValueError(
                    f"ppo_micro_batch_size ({self.ppo_micro_batch_size}) * ulysses_sequence_parallel_size ({sp_size}) "
                    f"must be >= n_gpus ({n_gpus})"
                )


@yaml_dataclass(ACTOR_PATH, extra_keys=True)
class FSDPActorConfig(ActorConfig):
    """The FSDP actor: ``fsdp_config`` becomes its ``engine`` (carrying the actor's strategy)."""

    optim: FSDPOptimizerConfig
    grad_clip: float
    ulysses_sequence_parallel_size: int
    entropy_from_logits_with_chunking: bool
    entropy_checkpointing: bool
    fsdp_config: FSDPEngineConfig
    entropy_from_logits_chunk_size: int = 2048
    pad_to_length: bool = False
    use_remove_padding: bool = False
    use_rollout_log_probs: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.engine = self.fsdp_config
        object.__setattr__(self.engine, "strategy", self.strategy)
        if self.ulysses_sequence_parallel_size > 1:
            self.fsdp_config.ulysses_sequence_parallel_size = self.ulysses_sequence_parallel_size

    def _sequence_parallel_size(self) -> int:
        return self.ulysses_sequence_parallel_size

    def validate(self, n_gpus: int, train_batch_size: int, model_config: dict | None = None) -> None:
        super().validate(n_gpus, train_batch_size, model_config)
        if self.ulysses_sequence_parallel_size > 1 and model_config and not model_config.get("use_remove_padding"):
            raise ValueError(
                "When using sequence parallelism for actor/ref policy, you must enable `use_remove_padding` "
                "(actor_rollout_ref.model.use_remove_padding=True)."
            )


@yaml_dataclass(ACTOR_PATH, config_name="ppo_megatron_trainer", extra_keys=True)
class McoreActorConfig(ActorConfig):
    """The Megatron actor: ``megatron`` becomes its ``engine``."""

    optim: McoreOptimizerConfig
    checkpoint: McoreCheckpointConfig
    megatron: McoreEngineConfig
    profile: dict[str, Any]
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_rollout_log_probs: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.engine = self.megatron
