"""The ``algorithm.rollout_correction`` settings, parsed and checked without torch (config validation uses it
before anything heavy is imported). The math is in ``rollout_is.py``, ``rollout_rs.py`` and
``rollout_correction.py``, which re-export these names; verl's typed ``RolloutCorrectionConfig`` (defaults from the
YAML, read at its import) is in :mod:`hybridrl.workers.config.rollout_corr`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hybridrl.algos.params import config_value

__all__ = [
    "BYPASS_LOSS_TYPES",
    "IS_LEVELS",
    "RS_OPTIONS",
    "ISThreshold",
    "RSOption",
    "RolloutCorrectionParams",
    "parse_is_threshold",
    "parse_rs_options",
    "rollout_correction_params",
]

IS_LEVELS: tuple[str, ...] = ("token", "sequence")


@dataclass(frozen=True)
class ISThreshold:
    """A parsed ``rollout_is_threshold``: TIS (``lower`` None) or IcePop (both bounds)."""

    upper: float
    lower: float | None = None

    @property
    def is_icepop(self) -> bool:
        return self.lower is not None


def parse_is_threshold(spec: float | int | str) -> ISThreshold:
    """``2.0`` / ``"2.0"`` → TIS upper bound; ``"0.5_5.0"`` → IcePop bounds [0.5, 5.0].

    Raises:
        ValueError: a non-number, a bound ≤ 0, or lower > upper (the message quotes the spec).
    """
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"rollout_is_threshold must be a float or a 'lower_upper' string, got {spec!r}")
    text = str(spec).strip()
    lower_text, _, upper_text = text.rpartition("_") if "_" in text else ("", "", text)
    try:
        upper = float(upper_text)
        lower = float(lower_text) if lower_text else None
    except ValueError as error:
        raise ValueError(f"rollout_is_threshold {spec!r} is not a number nor a 'lower_upper' pair") from error
    if not upper > 0 or (lower is not None and not lower > 0):
        raise ValueError(f"rollout_is_threshold {spec!r}: bounds must be > 0")
    if lower is not None and lower > upper:
        raise ValueError(f"rollout_is_threshold {spec!r}: lower bound must be <= upper bound")
    return ISThreshold(upper=upper, lower=lower)


RS_OPTIONS: tuple[str, ...] = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)


@dataclass(frozen=True)
class RSOption:
    """One rejection criterion: ``name`` (e.g. ``seq_mean_k1``) with its bounds on the statistic's scale
    (k1: log-ratio bounds; k2/k3: ``lower`` is None)."""

    name: str
    upper: float
    lower: float | None

    @property
    def level(self) -> str:  # token | seq_sum | seq_mean | seq_max
        return self.name.rpartition("_")[0]

    @property
    def estimator(self) -> str:  # k1 | k2 | k3
        return self.name.rpartition("_")[2]


def _parse_one(name: str, spec: str) -> RSOption:
    try:
        if name.endswith("k1"):
            lower_text, _, upper_text = spec.rpartition("_")
            upper = float(upper_text)
            lower = float(lower_text) if lower_text else 1.0 / upper
            if not (lower > 0 and upper > 0 and lower <= upper):
                raise ValueError("bounds must be > 0 with lower <= upper")
            return RSOption(name, upper=math.log(upper), lower=math.log(lower))
        if "_" in spec:
            raise ValueError("k2/k3 options take one upper bound, not 'lower_upper'")
        upper = float(spec)
        if not upper > 0:
            raise ValueError("the bound must be > 0")
    except ValueError as error:
        raise ValueError(f"rollout_rs_threshold {spec!r} for option {name!r}: {error}") from error
    return RSOption(name, upper=upper, lower=None)


def parse_rs_options(options: str, thresholds: float | int | str | None) -> tuple[RSOption, ...]:
    """``"token_k1,seq_max_k2"`` + ``"0.5_2.0,0.1"`` → the parsed criteria (duplicates dropped, order kept).

    Raises:
        ValueError: an unknown option (names the valid ones), a missing threshold, a count of thresholds that
            is neither 1 nor the number of options, or a bad bound.
    """
    names = list(dict.fromkeys(part.strip() for part in str(options).split(",") if part.strip()))
    unknown = [name for name in names if name not in RS_OPTIONS]
    if not names or unknown:
        raise ValueError(f"rollout_rs {options!r}: unknown option(s) {unknown}; valid: {', '.join(RS_OPTIONS)}")
    if thresholds is None or isinstance(thresholds, bool):
        raise ValueError(f"rollout_rs={options!r} needs rollout_rs_threshold (e.g. 2.0, or '0.5_2.0' for k1)")
    specs = [part.strip() for part in str(thresholds).split(",") if part.strip()]
    if len(specs) not in (1, len(names)):
        raise ValueError(
            f"rollout_rs_threshold {thresholds!r}: give one threshold for all options or one per option "
            f"({len(names)}: {', '.join(names)})"
        )
    specs = specs * len(names) if len(specs) == 1 else specs
    return tuple(_parse_one(name, spec) for name, spec in zip(names, specs))


BYPASS_LOSS_TYPES: tuple[str, ...] = ("ppo_clip", "reinforce")


@dataclass(frozen=True)
class RolloutCorrectionParams:
    """``algorithm.rollout_correction``, parsed once (see :func:`rollout_correction_params`)."""

    rollout_is: str | None  # token | sequence | None
    is_threshold: ISThreshold | None  # TIS upper bound or IcePop bounds; None when rollout_is is null
    rs_options: tuple[RSOption, ...]  # empty: no rejection sampling
    batch_normalize: bool  # rollout_is_batch_normalize
    bypass_mode: bool  # rollout log-probs serve as the old ones
    loss_type: str  # bypass only: ppo_clip | reinforce

    @property
    def corrects(self) -> bool:
        """IS weights or rejection sampling is on (False: metrics only)."""
        return self.rollout_is is not None or bool(self.rs_options)


def rollout_correction_params(section: Any) -> RolloutCorrectionParams:
    """Parse the ``algorithm.rollout_correction`` section (DictConfig, dict or object).

    Raises:
        ValueError: an unknown ``rollout_is`` / ``rollout_rs`` option / ``loss_type``, or a bad threshold.
    """
    level = config_value(section, "rollout_is")
    if level is not None and level not in IS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={level!r}: use one of {IS_LEVELS} or null")
    loss_type = config_value(section, "loss_type")
    if loss_type not in BYPASS_LOSS_TYPES:
        raise ValueError(f"algorithm.rollout_correction.loss_type={loss_type!r}: use one of {BYPASS_LOSS_TYPES}")
    rs = config_value(section, "rollout_rs")
    return RolloutCorrectionParams(
        rollout_is=level,
        is_threshold=parse_is_threshold(config_value(section, "rollout_is_threshold")) if level is not None else None,
        rs_options=parse_rs_options(rs, config_value(section, "rollout_rs_threshold")) if rs is not None else (),
        batch_normalize=bool(config_value(section, "rollout_is_batch_normalize")),
        bypass_mode=bool(config_value(section, "bypass_mode")),
        loss_type=loss_type,
    )
