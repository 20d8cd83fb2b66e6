"""Model-config helpers at verl 0.5's path ``verl.utils.model`` (the ones user code imports).

``compute_position_id_with_mask`` lives with the other tensor helpers in ``torch_functional`` and is
re-exported here because verl's datasets (and users' custom datasets) import it from this module.
Model loading itself is in ``hybridrl.workers.engine.model_loader``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hybridrl.utils.torch_functional import compute_position_id_with_mask

__all__ = ["compute_position_id_with_mask", "update_model_config"]


def update_model_config(module_config: Any, override_config_kwargs: Mapping[str, Any] | None) -> None:
    """Apply ``model.override_config`` to an HF config in place; nested dicts update sub-configs."""
    for key, value in (override_config_kwargs or {}).items():
        current = getattr(module_config, key, None)
        if isinstance(value, Mapping) and current is not None and not isinstance(current, Mapping):
            update_model_config(current, value)
        else:
            setattr(module_config, key, _plain(value))


def _plain(value: Any) -> Any:
    """Nested mappings and lists as plain dicts and lists: an OmegaConf node from the trainer's YAML (e.g.
    ``ppo_megatron_trainer.yaml``'s ``override_config.moe_config``) would make ``save_pretrained`` fail on JSON."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(item) for item in value]
    return value
