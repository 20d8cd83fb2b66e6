"""Sampling parameters of agent-loop trajectories (the server-mode counterpart of ``generation/sampling.py``).

Per call of ``AgentLoopWorker.generate_sequences``: ``rollout.temperature/top_p/top_k`` (``rollout.val_kwargs`` when
``meta_info["validate"]``), greedy when ``meta_info["do_sample"]`` is False (ReMax's baseline) or the validation
kwargs say so, ``logprobs`` = ``rollout.calculate_log_probs``. Per trajectory: a ``seed`` that is a pure function of
(``rollout.seed``, step, train/val, generation batch, row), so a trajectory samples the same tokens whoever shares
the server's batch with it, and a resumed run samples what an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["call_sampling_params", "trajectory_seed"]

_SEED_MODULUS = 2**63 - 1


def call_sampling_params(rollout_config: Any, meta_info: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling dict shared by one call's trajectories (without ``max_tokens`` and ``seed``)."""
    source = rollout_config.val_kwargs if meta_info.get("validate", False) else rollout_config
    do_sample = bool(source.do_sample) if meta_info.get("validate", False) else bool(rollout_config.do_sample)
    if "do_sample" in meta_info and not meta_info["do_sample"]:  # the caller asks for greedy (ReMax's baseline)
        do_sample = False
    params = {
        "temperature": float(source.temperature),
        "top_p": float(source.top_p),
        "top_k": int(source.top_k),
        "logprobs": bool(rollout_config.calculate_log_probs),
    }
    if not do_sample:
        params.update(temperature=0.0, top_p=1.0, top_k=-1)
    return params


def trajectory_seed(base_seed: int, meta_info: Mapping[str, Any], row: int) -> int:
    """Seed of trajectory ``row`` (its position in the step's generation batch)."""
    step = int(meta_info.get("global_steps", 0) or 0)
    validate = int(bool(meta_info.get("validate", False)))
    gen_batch = int(meta_info.get("gen_batch_index", 0) or 0)
    value = (((int(base_seed) * 1_000_003 + step) * 2 + validate) * 7_919 + gen_batch) * 104_729 + int(row)
    return value % _SEED_MODULUS
