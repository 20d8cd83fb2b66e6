"""verl's algorithm configs (``verl.trainer.config.algorithm``); defaults from the YAML's ``algorithm`` section,
see :mod:`hybridrl.base_config`. ``RolloutCorrectionConfig`` lives with the worker configs
(:mod:`hybridrl.workers.config.rollout_corr`, the policy-loss config holds one) and is re-exported here at verl's
path."""

from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass
from hybridrl.workers.config.rollout_corr import RolloutCorrectionConfig

__all__ = ["AlgoConfig", "FilterGroupsConfig", "KLControlConfig", "RolloutCorrectionConfig"]


@yaml_dataclass("algorithm.kl_ctrl", extra_keys=True)
class KLControlConfig(BaseConfig):
    """The in-reward KL coefficient's controller: ``fixed`` or ``adaptive`` (toward ``target_kl`` over
    ``horizon`` steps)."""

    type: str
    kl_coef: float
    horizon: int
    target_kl: float


@yaml_dataclass("algorithm.filter_groups", extra_keys=True)
class FilterGroupsConfig(BaseConfig):
    """DAPO's dynamic sampling: drop groups whose ``metric`` is the same for every sample, regenerate up to
    ``max_num_gen_batches`` batches (0: no limit)."""

    enable: bool
    metric: str | None
    max_num_gen_batches: int
    max_inflight_gen_batches: int = 1


@yaml_dataclass("algorithm", extra_keys=True)
class AlgoConfig(BaseConfig):
    """Advantage estimation, in-reward KL, PF-PPO, dynamic sampling and rollout correction."""

    gamma: float
    lam: float
    adv_estimator: str
    norm_adv_by_std_in_grpo: bool
    use_kl_in_reward: bool
    kl_penalty: str
    kl_ctrl: KLControlConfig
    use_pf_ppo: bool
    pf_ppo: dict[str, Any]
    filter_groups: FilterGroupsConfig | None
    rollout_correction: RolloutCorrectionConfig | None
    gdpo_reward_keys: list[str] | None = None
    gdpo_reward_weights: list[float] | None = None
