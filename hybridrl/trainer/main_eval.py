"""Offline evaluation: ``python -m hybridrl.trainer.main_eval key=value ...`` (verl's evaluation.yaml).

Scores a parquet written by ``main_generation`` (a list of responses per prompt in ``data.response_key``)
with the built-in scorers (``default_compute_score``, chosen by ``data.data_source_key``) or
``custom_reward_function.path/name``. Rows are scored in parallel Ray tasks. Reports, per data source,
``test_score/{data_source}``: the mean over prompts of the mean score over that prompt's responses (verl's metric).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from hybridrl.config import hydra_entry

_ROWS_PER_TASK = 64  # rows scored per Ray task: amortises task overhead for cheap rule-based scorers


def _score_value(result: Any) -> float:
    return float(result["score"] if isinstance(result, dict) else result)


def score_rows(compute_score: Callable, rows: list[tuple[str, list[str], Any]]) -> list[tuple[str, float]]:
    """``(data_source, responses, ground_truth)`` per row → ``(data_source, mean score over responses)``."""
    out = []
    for data_source, responses, ground_truth in rows:
        scores = [_score_value(compute_score(data_source, text, ground_truth)) for text in responses]
        out.append((data_source, float(np.mean(scores)) if scores else 0.0))
    return out


def _load_score_fn(config: DictConfig) -> Callable:
    from hybridrl.trainer.ppo.reward import get_custom_reward_fn
    from hybridrl.utils.reward_score import default_compute_score

    return get_custom_reward_fn(config) or default_compute_score


def _read_rows(config: DictConfig) -> list[tuple[str, list[str], Any]]:
    path = os.path.expanduser(config.data.path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"data.path={path} does not exist: point it at a parquet written by main_generation")
    frame = pd.read_parquet(path)
    keys = [config.data.response_key, config.data.data_source_key, config.data.reward_model_key]
    missing = [key for key in keys if key not in frame.columns]
    if missing:
        raise KeyError(f"{path} has no column(s) {missing} (columns: {list(frame.columns)}); set data.*_key")
    return [
        (str(row[keys[1]]), [str(text) for text in row[keys[0]]], row[keys[2]]["ground_truth"])
        for _, row in frame.iterrows()
    ]


def evaluate(config: DictConfig) -> dict[str, float]:
    """Score every row in Ray tasks; returns ``{"test_score/{data_source}": mean}``."""
    import ray

    from hybridrl.utils.ray_utils import init_ray

    rows = _read_rows(config)
    compute_score = _load_score_fn(config)
    init_ray(config.get("ray_init"), "cpu")
    remote_score = ray.remote(score_rows)
    score_ref = ray.put(compute_score)
    chunks = [rows[i : i + _ROWS_PER_TASK] for i in range(0, len(rows), _ROWS_PER_TASK)]
    per_source: dict[str, list[float]] = defaultdict(list)
    for chunk_result in ray.get([remote_score.remote(score_ref, chunk) for chunk in chunks]):
        for data_source, score in chunk_result:
            per_source[data_source].append(score)
    return {f"test_score/{source}": float(np.mean(scores)) for source, scores in per_source.items()}


def run_eval(config: DictConfig) -> dict[str, float]:
    """Evaluate and print the metrics."""
    metrics = evaluate(config)
    print(metrics, flush=True)
    return metrics


# unknown keys are reported by Hydra (struct mode)
main = hydra_entry("evaluation", run_eval)


if __name__ == "__main__":
    main()
