"""verl's engine configs (``verl.workers.config.engine``): how a training backend shards and runs the model.

Defaults come from the shipped YAML (``actor_rollout_ref.actor.fsdp_config`` for FSDP,
``actor_rollout_ref.actor.megatron`` of ``ppo_megatron_trainer.yaml`` for Megatron; see
:mod:`hybridrl.base_config`); a default in a class body applies only while the YAML has no such key.
"""

import warnings
from dataclasses import field
from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass

__all__ = ["EngineConfig", "EngineRouterReplayConfig", "FSDPEngineConfig", "McoreEngineConfig"]

FSDP_PATH = "actor_rollout_ref.actor.fsdp_config"
MEGATRON_PATH = "actor_rollout_ref.actor.megatron"
ROUTER_REPLAY_MODES = ("disabled", "R2", "R3")


def check_router_replay_mode(mode: str) -> None:
    if mode not in ROUTER_REPLAY_MODES:
        raise ValueError(f"Invalid router_replay mode: {mode!r}. Must be one of {list(ROUTER_REPLAY_MODES)}")


@yaml_dataclass("actor_rollout_ref.actor.router_replay")
class EngineRouterReplayConfig(BaseConfig):
    """MoE routing replay inside an engine: ``disabled`` | ``R2`` (replay the trainer's routes) | ``R3`` (replay
    the rollout's routes)."""

    mode: str = "disabled"
    record_file: str | None = None
    replay_file: str | None = None

    def __post_init__(self) -> None:
        check_router_replay_mode(self.mode)


@yaml_dataclass(FSDP_PATH)
class EngineConfig(BaseConfig):
    """What every training engine reads: offloading, dtype, micro-batching, seed."""

    _mutable_fields = BaseConfig._mutable_fields | {
        "use_dynamic_bsz",
        "max_token_len_per_gpu",
        "micro_batch_size_per_gpu",
        "infer_max_token_len_per_gpu",
        "infer_micro_batch_size_per_gpu",
        "use_fused_kernels",
        "use_remove_padding",
        "forward_only",
    }

    param_offload: bool
    optimizer_offload: bool
    grad_offload: bool = False
    forward_only: bool = False
    strategy: str | None = None
    dtype: str = "bfloat16"
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int | None = None
    micro_batch_size_per_gpu: int | None = None
    infer_max_token_len_per_gpu: int | None = None
    infer_micro_batch_size_per_gpu: int | None = None
    use_fused_kernels: bool = False
    use_remove_padding: bool = True
    seed: int = 42
    full_determinism: bool = False
    router_replay: EngineRouterReplayConfig = field(default_factory=EngineRouterReplayConfig)


@yaml_dataclass(FSDP_PATH, extra_keys=True)
class FSDPEngineConfig(EngineConfig):
    """FSDP / FSDP2 sharding (``actor_rollout_ref.actor.fsdp_config``)."""

    _mutable_fields = EngineConfig._mutable_fields | {"ulysses_sequence_parallel_size"}

    wrap_policy: dict[str, Any]
    offload_policy: bool
    reshard_after_forward: bool
    fsdp_size: int
    forward_prefetch: bool
    model_dtype: str = "fp32"
    use_orig_params: bool = False
    mixed_precision: dict[str, Any] | None = None
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    strategy: str | None = "fsdp"
    pad_to_length: bool = False
    pad_to_length_bucket: int = 1024

    def __post_init__(self) -> None:
        if self.strategy not in ("fsdp", "fsdp2"):
            raise ValueError(f"FSDPEngineConfig.strategy={self.strategy!r}: use fsdp or fsdp2")


@yaml_dataclass(MEGATRON_PATH, config_name="ppo_megatron_trainer", extra_keys=True)
class McoreEngineConfig(EngineConfig):
    """Megatron-core parallelism (``actor_rollout_ref.actor.megatron``); tensor parallel size 1 turns
    sequence parallelism off (with a warning), as in verl."""

    _mutable_fields = EngineConfig._mutable_fields | {"sequence_parallel"}

    tensor_model_parallel_size: int
    expert_model_parallel_size: int
    expert_tensor_parallel_size: int | None
    pipeline_model_parallel_size: int
    virtual_pipeline_model_parallel_size: int | None
    context_parallel_size: int
    sequence_parallel: bool
    use_distributed_optimizer: bool
    use_dist_checkpointing: bool
    dist_checkpointing_path: str | None
    override_transformer_config: dict[str, Any]
    use_mbridge: bool
    dynamic_context_parallel: bool = False
    max_seqlen_per_dp_cp_rank: int | None = None
    dist_checkpointing_prefix: str = ""
    override_ddp_config: dict[str, Any] = field(default_factory=dict)
    override_mcore_model_config: dict[str, Any] = field(default_factory=dict)
    vanilla_mbridge: bool = False
    use_megatron_fsdp: bool = False
    strategy: str | None = "megatron"

    def __post_init__(self) -> None:
        if self.strategy != "megatron":
            raise ValueError(f"McoreEngineConfig.strategy={self.strategy!r}: must be megatron")
        if self.dtype not in ("bfloat16", "float16"):
            raise ValueError(f"McoreEngineConfig.dtype={self.dtype!r} not supported: use bfloat16 or float16")
        if self.dynamic_context_parallel and not (
            isinstance(self.max_seqlen_per_dp_cp_rank, int) and self.max_seqlen_per_dp_cp_rank > 0
        ):
            raise ValueError("max_seqlen_per_dp_cp_rank must be a positive integer when dynamic_context_parallel is on")
        if self.tensor_model_parallel_size == 1 and self.sequence_parallel:
            warnings.warn("set sequence parallel to false as TP size is 1", stacklevel=2)
            self.sequence_parallel = False
