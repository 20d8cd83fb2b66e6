"""Validation: generate on the held-out set with ``rollout.val_kwargs``, score, and reduce to verl's metrics.

    val dataloader ─► repeat val_kwargs.n ─► actor_rollout.generate_sequences (padded to the world size)
                   ─► val reward fn ─► process_validation_metrics ─► val-core/... and val-aux/...

Metric names: ``val-core/{data_source}/{var}/{metric}`` for the core variable (``acc`` if the reward function
returns it, else ``reward``) at the largest ``@N``, and ``val-aux/...`` for everything else. The generation
dumps (``trainer.validation_data_dir``, and the training rollouts' ``trainer.rollout_data_dir``) are
``{step}.jsonl`` files written by :func:`dump_generations`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from omegaconf import DictConfig

from hybridrl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from hybridrl.trainer.ppo.metric_utils import process_validation_metrics
from hybridrl.trainer.ppo.protocols import RewardManager, RolloutGroup
from hybridrl.trainer.ppo.stages import align_rows, with_row_columns
from hybridrl.utils.tracking import Tracking, ValidationGenerationsLogger

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["Validator", "decode_responses", "dump_generations", "reduce_validation_metrics"]

# Validation generations are logged in a fixed shuffled order (verl's seed).
_LOG_SHUFFLE_SEED = 42


class Validator:
    """Runs validation on the actor's worker group.

    Args:
        tokenizer: decodes prompts and responses.
        dataloader: the validation prompts.
        reward_fn: the validation reward manager, called with ``return_dict=True``.
        val_kwargs: ``actor_rollout_ref.rollout.val_kwargs`` (``n``, ``do_sample``).
        log_generations: ``trainer.log_val_generations``: samples sent to the experiment logger (0: none).
        dump_dir: ``trainer.validation_data_dir``: where ``{step}.jsonl`` generation dumps go (None: none).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, dataloader: Iterable[dict], reward_fn: RewardManager,
                 val_kwargs: DictConfig, log_generations: int, dump_dir: str | None) -> None:
        self.tokenizer = tokenizer
        self.dataloader = dataloader
        self.reward_fn = reward_fn
        self.val_kwargs = val_kwargs
        self.log_generations = log_generations
        self.dump_dir = dump_dir
        self.generations_logger = ValidationGenerationsLogger()

    def validate(
        self, actor_rollout: RolloutGroup, global_steps: int, logger: Tracking | None = None
    ) -> dict[str, float]:
        """Validation metrics at ``global_steps``; ``logger`` (a Tracking) receives the logged generations."""
        scores: list[float] = []
        inputs: list[str] = []
        outputs: list[str] = []
        extra: dict[str, list] = defaultdict(list)
        data_sources: list[str] = []
        uids: list[str] = []
        for batch_dict in self.dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            if "uid" not in batch.non_tensor_batch:
                batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
            batch = batch.repeat(self.val_kwargs.n, interleave=True)
            output = self._generate(batch, actor_rollout, global_steps)
            batch = align_rows(batch, output).union(output)
            reward = self.reward_fn(batch, return_dict=True)
            seq_scores = reward["reward_tensor"].sum(-1).tolist()
            scores.extend(seq_scores)
            extra["reward"].extend(seq_scores)
            for key, values in reward.get("reward_extra_info", {}).items():
                extra[key].extend(values)
            inputs.extend(self.tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True))
            outputs.extend(decode_responses(self.tokenizer, batch))
            data_sources.extend(batch.non_tensor_batch.get("data_source", ["unknown"] * len(batch)))
            uids.extend(batch.non_tensor_batch["uid"])
        self._log_generations(inputs, outputs, scores, logger, global_steps)
        dump_generations(self.dump_dir, global_steps, inputs, outputs, scores)
        return reduce_validation_metrics(data_sources, uids, dict(extra))

    def _generate(self, batch: DataProto, actor_rollout: RolloutGroup, global_steps: int) -> DataProto:
        """Pops the prompts off ``batch`` (a batch this method's caller owns) and returns the generations."""
        gen_batch = with_row_columns(batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"]), batch,
                                     actor_rollout)
        gen_batch.meta_info = {
            "eos_token_id": self.tokenizer.eos_token_id,
            "pad_token_id": self.tokenizer.pad_token_id,
            "recompute_log_prob": False,
            "do_sample": self.val_kwargs.do_sample,
            "validate": True,
            "global_steps": global_steps,
        }
        if getattr(actor_rollout, "reads_row_columns", False):  # the agent-loop manager takes any number of rows
            output = actor_rollout.generate_sequences(gen_batch)
        else:
            padded, pad_size = pad_dataproto_to_divisor(gen_batch, actor_rollout.world_size)
            output = unpad_dataproto(actor_rollout.generate_sequences(padded), pad_size=pad_size)
        output.meta_info = {}
        return output

    def _log_generations(self, inputs: list[str], outputs: list[str], scores: list[float], logger: Tracking | None,
                         global_steps: int) -> None:
        if self.log_generations <= 0 or logger is None:
            return
        samples = sorted(zip(inputs, outputs, scores))
        np.random.RandomState(_LOG_SHUFFLE_SEED).shuffle(samples)
        self.generations_logger.log(logger, samples[: self.log_generations], global_steps)


def decode_responses(tokenizer: PreTrainedTokenizerBase, batch: DataProto) -> list[str]:
    """The valid response tokens of every row (``responses [B, R]``, ``attention_mask [B, P+R]``) as text."""
    responses = batch.batch["responses"]
    lengths = batch.batch["attention_mask"][:, -responses.shape[-1]:].sum(-1).tolist()
    return [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(responses, lengths)]


def reduce_validation_metrics(data_sources: list[str], uids: list[str], infos: dict[str, list]) -> dict[str, float]:
    """``val-core/...`` and ``val-aux/...`` metrics from per-sample values (see the module docstring)."""
    per_source = process_validation_metrics(data_sources, uids, infos)
    metrics: dict[str, float] = {}
    for data_source, var_metrics in per_source.items():
        core_var = "acc" if "acc" in var_metrics else "reward"
        for var_name, metric_values in var_metrics.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric_values)
            for metric_name, value in metric_values.items():
                is_core = (
                    var_name == core_var
                    and any(metric_name.startswith(p) for p in ("mean", "maj", "best"))
                    and f"@{n_max}" in metric_name
                )
                section = "val-core" if is_core else "val-aux"
                metrics[f"{section}/{data_source}/{var_name}/{metric_name}"] = value
    return metrics


def dump_generations(dump_dir: str | None, global_steps: int, inputs: list[str], outputs: list[str],
                     scores: list[float], gts: list | None = None) -> None:
    """Write ``{dump_dir}/{global_steps}.jsonl``: one ``{input, output, score, step[, gts]}`` row per sample."""
    if not dump_dir:
        return
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, f"{global_steps}.jsonl")
    with open(path, "w", encoding="utf-8") as fp:
        for i, (inp, out, score) in enumerate(zip(inputs, outputs, scores)):
            row = {"input": inp, "output": out, "score": score, "step": global_steps}
            if gts is not None:
                row["gts"] = gts[i]
            fp.write(json.dumps(row, default=str) + "\n")
