"""Validation: generate on the held-out set with ``rollout.val_kwargs``, score, and reduce to verl's metrics.

Metric names: ``val-core/{data_source}/{var}/{metric}`` for the core variable (``acc`` if the reward function
returns it, else ``reward``) at the largest ``@N``, and ``val-aux/...`` for everything else.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from typing import Any

import numpy as np

from hybridrl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from hybridrl.trainer.ppo.metric_utils import process_validation_metrics


class ValidationMixin:
    config: Any
    tokenizer: Any

    def _validate(self) -> dict[str, float]:
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        scores: list[float] = []
        inputs: list[str] = []
        outputs: list[str] = []
        extra: dict[str, list] = defaultdict(list)
        data_sources: list[str] = []
        uids: list[str] = []
        for batch_dict in self.val_dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            if "uid" not in batch.non_tensor_batch:
                batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
            batch = batch.repeat(val_kwargs.n, interleave=True)
            batch = batch.union(self._generate_for_validation(batch, val_kwargs))
            reward = self.val_reward_fn(batch, return_dict=True)
            seq_scores = reward["reward_tensor"].sum(-1).tolist()
            scores.extend(seq_scores)
            extra["reward"].extend(seq_scores)
            for key, values in reward.get("reward_extra_info", {}).items():
                extra[key].extend(values)
            inputs.extend(self.tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True))
            outputs.extend(self._decode_responses(batch))
            data_sources.extend(batch.non_tensor_batch.get("data_source", ["unknown"] * len(batch)))
            uids.extend(batch.non_tensor_batch["uid"])
        self._maybe_log_val_generations(inputs, outputs, scores)
        self._maybe_dump_generations(inputs, outputs, scores, self.config.trainer.get("validation_data_dir"))
        return self._reduce_validation(data_sources, uids, dict(extra))

    def _generate_for_validation(self, batch: DataProto, val_kwargs: Any) -> DataProto:
        gen_batch = batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"])
        gen_batch.meta_info = {
            "eos_token_id": self.tokenizer.eos_token_id,
            "pad_token_id": self.tokenizer.pad_token_id,
            "recompute_log_prob": False,
            "do_sample": val_kwargs.do_sample,
            "validate": True,
            "global_steps": self.global_steps,
        }
        padded, pad_size = pad_dataproto_to_divisor(gen_batch, self.actor_rollout_wg.world_size)
        output = self.actor_rollout_wg.generate_sequences(padded)
        output = unpad_dataproto(output, pad_size=pad_size)
        output.meta_info = {}
        return output

    def _decode_responses(self, batch: DataProto) -> list[str]:
        responses = batch.batch["responses"]
        lengths = batch.batch["attention_mask"][:, -responses.shape[-1]:].sum(-1).tolist()
        return [self.tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(responses, lengths)]

    def _reduce_validation(self, data_sources: list[str], uids: list[str], infos: dict[str, list]) -> dict[str, float]:
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

    def _maybe_log_val_generations(self, inputs: list[str], outputs: list[str], scores: list[float]) -> None:
        count = self.config.trainer.log_val_generations
        if count <= 0 or self.logger is None:
            return
        samples = sorted(zip(inputs, outputs, scores))
        np.random.RandomState(42).shuffle(samples)
        self.validation_generations_logger.log(self.logger, samples[:count], self.global_steps)

    def _maybe_dump_generations(self, inputs: list[str], outputs: list[str], scores: list[float],
                                dump_dir: str | None, gts: list | None = None) -> None:
        if not dump_dir:
            return
        os.makedirs(dump_dir, exist_ok=True)
        path = os.path.join(dump_dir, f"{self.global_steps}.jsonl")
        with open(path, "w", encoding="utf-8") as fp:
            for i, (inp, out, score) in enumerate(zip(inputs, outputs, scores)):
                row = {"input": inp, "output": out, "score": score, "step": self.global_steps}
                if gts is not None:
                    row["gts"] = gts[i]
                fp.write(json.dumps(row, default=str) + "\n")
