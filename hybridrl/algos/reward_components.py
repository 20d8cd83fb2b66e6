"""The reward components GDPO normalises one by one: read from the batch by the names the config gives.

``compute_score`` may return a dict (``{"score": 1.0, "accuracy_reward": 1.0, "format_reward": 0.5}``);
the reward manager hands every key to the batch as a per-response column (``non_tensor_batch[key]``,
``[B]``). ``algorithm.gdpo_reward_keys`` says which columns are GDPO's components and
``algorithm.gdpo_reward_weights`` how to weigh them (null: equally).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hybridrl.algos.params import config_value

__all__ = ["gdpo_reward_components"]


def gdpo_reward_components(
    config: Any, non_tensor_batch: Mapping[str, Any], device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(components [B, K] float32, weights [K] float32 or None)`` for the K keys of ``algorithm.gdpo_reward_keys``.

    Raises:
        ValueError: no keys configured, a key the batch lacks, or a weight count that differs from K.
    """
    keys = list(config_value(config, "gdpo_reward_keys") or [])
    if not keys:
        raise ValueError(
            "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the keys of the reward components your "
            "compute_score returns in its dict, e.g. algorithm.gdpo_reward_keys='[accuracy_reward,format_reward]'."
        )
    missing = [key for key in keys if key not in non_tensor_batch]
    if missing:
        raise ValueError(
            f"algorithm.gdpo_reward_keys names {missing}, which the batch lacks (it holds {sorted(non_tensor_batch)}): "
            "make compute_score return a dict with these keys."
        )
    columns = [torch.as_tensor(np.asarray(non_tensor_batch[key], dtype=np.float32)) for key in keys]
    components = torch.stack(columns, dim=-1).to(device)
    weights = config_value(config, "gdpo_reward_weights")
    if weights is None:
        return components, None
    if len(weights) != len(keys):
        raise ValueError(
            f"algorithm.gdpo_reward_weights has {len(weights)} weights for the {len(keys)} keys of "
            "algorithm.gdpo_reward_keys: give one weight per key, or leave it null for equal weights."
        )
    return components, torch.tensor([float(w) for w in weights], dtype=torch.float32, device=device)
