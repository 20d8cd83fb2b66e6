"""verl's optimizer configs (``verl.workers.config.optimizer``); defaults from the YAML's ``actor.optim``
(``ppo_trainer.yaml`` for FSDP, ``ppo_megatron_trainer.yaml`` for Megatron), see :mod:`hybridrl.base_config`."""

import warnings

from hybridrl.base_config import BaseConfig, yaml_dataclass

__all__ = ["FSDPOptimizerConfig", "McoreOptimizerConfig", "OptimizerConfig"]

OPTIM_PATH = "actor_rollout_ref.actor.optim"
LR_SCHEDULER_TYPES = ("constant", "cosine")


@yaml_dataclass(OPTIM_PATH)
class OptimizerConfig(BaseConfig):
    """Learning rate, warm-up, weight decay and gradient clipping; ``grad_clip`` is verl's deprecated alias of
    ``clip_grad`` (set, it wins, with a DeprecationWarning)."""

    _mutable_fields = frozenset({"clip_grad", "total_training_steps", "lr_warmup_steps"})

    lr: float
    lr_warmup_steps_ratio: float
    total_training_steps: int
    weight_decay: float
    lr_warmup_steps: int | None
    betas: list[float]
    clip_grad: float = 1.0
    grad_clip: float | None = None

    def __post_init__(self) -> None:
        if self.grad_clip is not None:
            warnings.warn("`grad_clip` is deprecated, use `clip_grad` instead.", DeprecationWarning, stacklevel=2)
            self.clip_grad = self.grad_clip


@yaml_dataclass(OPTIM_PATH, extra_keys=True)
class FSDPOptimizerConfig(OptimizerConfig):
    """The torch optimizer of the FSDP engine and its LR schedule (``constant`` | ``cosine``); ``warmup_style``
    is verl's deprecated alias of ``lr_scheduler_type`` (set, it wins)."""

    _mutable_fields = OptimizerConfig._mutable_fields | {"lr_scheduler_type"}

    min_lr_ratio: float | None
    warmup_style: str | None
    num_cycles: float
    optimizer: str = "AdamW"
    optimizer_impl: str = "torch.optim"
    lr_scheduler_type: str = "constant"
    override_optimizer_config: dict | None = None
    zero_indexed_step: bool = True

    def __post_init__(self) -> None:
        if self.warmup_style is not None:
            if self.warmup_style not in LR_SCHEDULER_TYPES:
                raise ValueError(f"optim.warmup_style={self.warmup_style!r}: use one of {LR_SCHEDULER_TYPES}")
            self.lr_scheduler_type = self.warmup_style
        if self.lr_scheduler_type not in LR_SCHEDULER_TYPES:
            raise ValueError(f"optim.lr_scheduler_type={self.lr_scheduler_type!r}: use one of {LR_SCHEDULER_TYPES}")
        super().__post_init__()


@yaml_dataclass(OPTIM_PATH, config_name="ppo_megatron_trainer", extra_keys=True)
class McoreOptimizerConfig(OptimizerConfig):
    """Megatron-core's distributed optimizer and its scheduler (incl. the Muon fields verl passes through)."""

    optimizer: str
    lr_warmup_init: float
    lr_decay_steps: int | None
    lr_decay_style: str
    min_lr: float
    weight_decay_incr_style: str
    lr_wsd_decay_style: str
    lr_wsd_decay_steps: int | None
    use_checkpoint_opt_param_scheduler: bool
    use_precision_aware_optimizer: bool = False
    main_grads_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    use_layer_wise_distributed_optimizer: bool = False
    muon_momentum: float = 0.95
    muon_nesterov: bool = False
    muon_split_qkv: bool = True
    muon_scale_mode: str = "spectral"
    muon_coefficient_type: str = "quintic"
    muon_num_ns_steps: int = 5
    muon_tp_mode: str = "blockwise"
    muon_fp32_matmul_prec: str = "medium"
    muon_extra_scale_factor: float = 1.0
    muon_scalar_optimizer: str = "adam"
    muon_match_adamw_update_rms: bool = False
    override_optimizer_config: dict | None = None
