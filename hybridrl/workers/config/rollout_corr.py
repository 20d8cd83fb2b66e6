"""verl's ``RolloutCorrectionConfig`` (``verl.trainer.config.algorithm``): ``algorithm.rollout_correction`` as a typed
config with verl's presets, over the parser of :mod:`hybridrl.algos.rollout_correction_config`.

It lives with the worker configs because ``PolicyLossConfig`` holds one (and the workers may not import the
trainer); :mod:`hybridrl.trainer.config` re-exports it at verl's path. It is kept out of ``hybridrl.algos`` so that
importing the math never reads the YAML.
"""

from typing import Any

from hybridrl.algos.rollout_correction_config import RolloutCorrectionParams, rollout_correction_params
from hybridrl.base_config import BaseConfig, yaml_dataclass

__all__ = ["RolloutCorrectionConfig"]


# verl's presets: name -> (rollout_is, rollout_rs, bypass_mode, loss_type, default IS threshold, default RS threshold).
# An IcePop preset's IS threshold is the pair (lower, upper) written "lower_upper".
_PRESETS: dict[str, tuple[str | None, str | None, bool, str, Any, Any]] = {
    "decoupled_token_is": ("token", None, False, "ppo_clip", 2.0, None),
    "decoupled_seq_is": ("sequence", None, False, "ppo_clip", 2.0, None),
    "decoupled_token_icepop": ("token", None, False, "ppo_clip", (0.5, 5.0), None),
    "decoupled_seq_is_rs": ("sequence", "seq_sum_k1", False, "ppo_clip", 2.0, "0.5_2.0"),
    "decoupled_geo_rs": (None, "seq_mean_k1", False, "ppo_clip", None, "0.999_1.001"),
    "decoupled_geo_rs_seq_tis": ("sequence", "seq_mean_k1", False, "ppo_clip", 2.0, "0.999_1.001"),
    "decoupled_geo_rs_token_tis": ("token", "seq_mean_k1", False, "ppo_clip", 2.0, "0.999_1.001"),
    "decoupled_k3_rs": (None, "seq_mean_k3", False, "ppo_clip", None, 0.01),
    "decoupled_k3_rs_seq_tis": ("sequence", "seq_mean_k3", False, "ppo_clip", 2.0, 0.01),
    "decoupled_k3_rs_token_tis": ("token", "seq_mean_k3", False, "ppo_clip", 2.0, 0.01),
    "bypass_ppo_clip": (None, None, True, "ppo_clip", None, None),
    "bypass_ppo_clip_geo_rs": (None, "seq_mean_k1", True, "ppo_clip", None, "0.999_1.001"),
    "bypass_ppo_clip_k3_rs": (None, "seq_mean_k3", True, "ppo_clip", None, 0.01),
    "bypass_pg_is": ("sequence", None, True, "reinforce", 2.0, None),
    "bypass_pg_token_icepop": ("token", None, True, "reinforce", (0.5, 5.0), None),
    "bypass_pg_geo_rs": (None, "seq_mean_k1", True, "reinforce", None, "0.999_1.001"),
    "bypass_pg_geo_rs_seq_tis": ("sequence", "seq_mean_k1", True, "reinforce", 2.0, "0.999_1.001"),
    "bypass_pg_geo_rs_token_tis": ("token", "seq_mean_k1", True, "reinforce", 2.0, "0.999_1.001"),
    "disabled": (None, None, False, "ppo_clip", None, None),
}


def _preset(name: str) -> classmethod:
    rollout_is, rollout_rs, bypass_mode, loss_type, is_default, rs_default = _PRESETS[name]

    def build(cls, *args: Any, **kwargs: Any) -> Any:
        values: dict[str, Any] = {"rollout_is": rollout_is, "rollout_rs": rollout_rs}
        values.update(bypass_mode=bypass_mode, loss_type=loss_type)
        if isinstance(is_default, tuple):  # IcePop: (threshold=upper, threshold_lower=lower)
            upper = kwargs.pop("threshold", args[0] if args else is_default[1])
            lower = kwargs.pop("threshold_lower", args[1] if len(args) > 1 else is_default[0])
            values["rollout_is_threshold"] = f"{lower}_{upper}"
        elif is_default is not None and rs_default is None:  # IS only: (threshold)
            values["rollout_is_threshold"] = kwargs.pop("threshold", args[0] if args else is_default)
        else:  # (is_threshold, rs_threshold) or (rs_threshold) alone
            names = ("is_threshold", "rs_threshold") if is_default is not None else ("rs_threshold",)
            given = dict(zip(names, args)) | kwargs
            if is_default is not None:
                values["rollout_is_threshold"] = given.pop("is_threshold", is_default)
            if rs_default is not None:
                values["rollout_rs_threshold"] = given.pop("rs_threshold", rs_default)
            kwargs = given
        if kwargs:
            raise TypeError(f"RolloutCorrectionConfig.{name}() got unexpected arguments {sorted(kwargs)}")
        return cls(**values)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = (
        f"verl's ``{name}`` preset: rollout_is={rollout_is}, rollout_rs={rollout_rs}, bypass_mode={bypass_mode}."
    )
    return classmethod(build)


def _with_presets(cls: type) -> type:
    for name in _PRESETS:
        setattr(cls, name, _preset(name))
    return cls


@_with_presets
@yaml_dataclass("algorithm.rollout_correction", extra_keys=True)
class RolloutCorrectionConfig(BaseConfig):
    """``algorithm.rollout_correction`` as verl's typed config (defaults: the YAML section), with verl's presets
    (``RolloutCorrectionConfig.decoupled_token_is()``, ``.bypass_pg_is()``, ... ``.disabled()``).

    ``params()`` parses it into :class:`RolloutCorrectionParams`, the form the math takes.
    """

    rollout_is: str | None
    rollout_is_threshold: Any  # a float (TIS) or a "lower_upper" string (IcePop)
    rollout_is_batch_normalize: bool
    rollout_rs: str | None
    rollout_rs_threshold: Any  # a float, a "lower_upper" string, or one per option joined by commas
    bypass_mode: bool
    loss_type: str

    def params(self) -> RolloutCorrectionParams:
        """The settings parsed and checked (ValueError on a bad option or threshold)."""
        return rollout_correction_params(self)
