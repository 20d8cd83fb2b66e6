"""Deliberately off-policy rollout engines for the rollout-correction learning test.

``rollout.name=hf_perturbed_temperature`` is the real hf engine (``HFRollout``: same decode loop, same weight sync)
except that it samples at ``rollout.engine_kwargs.perturbed.sampling_temperature`` instead of ``rollout.temperature``,
the temperature the trainer's actor assumes. It reports ``rollout_log_probs`` truthfully, under the distribution it
sampled from (``log_softmax(logits / sampling_temperature)``), so the trainer sees a genuine behaviour policy μ that
differs from its π: exactly the situation rollout correction (``algorithm.rollout_correction``) is for.

``rollout.name=hf_stale_weights`` is the real hf engine that generates every training batch with the weights it
received ``rollout.engine_kwargs.perturbed.staleness`` syncs earlier (a k-version-stale rollout, as in async training),
then puts the fresh weights back (so the hybrid engine's weight verification still sees the actor's weights).
Validation uses the fresh weights. Its ``rollout_log_probs`` are those of the stale weights it sampled with.

The Ray workers import this module through ``actor_rollout_ref.model.external_lib``, which registers the engine.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

import torch

from hybridrl.generation.records import SamplingParams
from hybridrl.workers.rollout import register_rollout
from hybridrl.workers.rollout.hf_rollout import HFRollout, build_hf_engine_model

ENGINE_NAME = "hf_perturbed_temperature"


class PerturbedTemperatureRollout(HFRollout):
    """``HFRollout`` that samples (and reports log-probs) at ``sampling_temperature`` whenever it samples."""

    def __init__(self, *args: Any, sampling_temperature: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_temperature = float(sampling_temperature)
        self._validating = False

    def _generate_token_ids(self, prompt_token_ids: list[list[int]], params: SamplingParams):
        if not params.greedy and not self._validating:
            params = replace(params, temperature=self.sampling_temperature)
        return super()._generate_token_ids(prompt_token_ids, params)

    def generate_sequences(self, prompts):
        # validation keeps rollout.val_kwargs: the perturbation is of the training samples only
        self._validating = bool(prompts.meta_info.get("validate", False))
        return super().generate_sequences(prompts)


def _build_perturbed(engine_class: type[HFRollout], rollout_config: Any, model_config: Any, kw: dict, **knobs: Any):
    """The hf engine's model and arguments (``rollout/__init__._build_hf``) plus the perturbation's knobs."""
    model = build_hf_engine_model(rollout_config, model_config, **kw)
    return engine_class(
        model, rollout_config, eos_token_ids=kw["eos_token_ids"], pad_token_id=kw["pad_token_id"], seed=kw["seed"],
        **knobs,
    )


@register_rollout(ENGINE_NAME)
def _build(rollout_config: Any, model_config: Any, **kw: Any) -> PerturbedTemperatureRollout:
    temperature = rollout_config.engine_kwargs.perturbed.sampling_temperature
    return _build_perturbed(PerturbedTemperatureRollout, rollout_config, model_config, kw, sampling_temperature=temperature)


STALE_ENGINE_NAME = "hf_stale_weights"


class StaleWeightsRollout(HFRollout):
    """``HFRollout`` that samples training batches with the weights of ``staleness`` generate calls ago."""

    def __init__(self, *args: Any, staleness: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history: deque[dict[str, torch.Tensor]] = deque(maxlen=int(staleness) + 1)

    @torch.no_grad()
    def generate_sequences(self, prompts):
        if prompts.meta_info.get("validate", False):
            return super().generate_sequences(prompts)
        fresh = {name: param.detach().clone() for name, param in self._params.items()}
        self.history.append(fresh)
        self._load(self.history[0])  # the oldest kept version: `staleness` calls ago (fewer at the start)
        try:
            return super().generate_sequences(prompts)
        finally:
            self._load(fresh)

    def _load(self, weights: dict[str, torch.Tensor]) -> None:
        for name, param in self._params.items():
            param.copy_(weights[name])


@register_rollout(STALE_ENGINE_NAME)
def _build_stale(rollout_config: Any, model_config: Any, **kw: Any) -> StaleWeightsRollout:
    staleness = rollout_config.engine_kwargs.perturbed.staleness
    return _build_perturbed(StaleWeightsRollout, rollout_config, model_config, kw, staleness=staleness)
