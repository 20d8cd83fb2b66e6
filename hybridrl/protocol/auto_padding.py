"""The auto-padding switch: when on, ``DataProto.chunk`` accepts a row count not divisible by the number
of chunks, and the worker-group dispatch pads a batch to a multiple of its world size (then trims the
output). Off by default, as in verl.

On when any of: ``DataProtoConfig.auto_padding = True`` (process-wide), env ``VERL_AUTO_PADDING`` or
``HYBRIDRL_AUTO_PADDING`` = ``1``/``true``, or the meta key ``_verl_auto_padding`` of one DataProto
(``DataProto.from_dict(..., auto_padding=True)`` sets it).
"""

from __future__ import annotations

import os

from hybridrl.protocol.checks import require

__all__ = ["DataProtoConfig"]

# Env vars that switch auto padding on for every DataProto (verl's name, then hybridrl's).
_AUTO_PADDING_ENVS = ("VERL_AUTO_PADDING", "HYBRIDRL_AUTO_PADDING")


class _DataProtoConfigMeta(type):
    _config: dict[str, bool] = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        enabled_by_env = any(os.getenv(name, "FALSE").upper() in ("TRUE", "1") for name in _AUTO_PADDING_ENVS)
        return enabled_by_env or cls._config.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        require(isinstance(enabled, bool), f"auto_padding must be a bool, got {enabled!r} ({type(enabled).__name__})")
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide switch: ``DataProtoConfig.auto_padding = True`` lets ``chunk`` split unevenly."""
