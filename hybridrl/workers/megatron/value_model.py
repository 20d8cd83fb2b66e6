"""The value model of the Megatron critic and reward model: a megatron-core ``GPTModel`` with a scalar head.

    HF (what the FSDP critic / RM load)            megatron-core (this rank)
    *ForTokenClassification, num_labels=1          GPTModel, output layer untied from the embeddings
      model.*  (the causal LM's trunk)      ──►      embedding.*, decoder.*  (built-in converter or mbridge)
      score.weight [1, H], score.bias [1]   ──►      output_layer = ValueHead (replicated over TP)

The head comes from loading the folder exactly as the FSDP workers do
(:func:`hybridrl.workers.megatron.model.load_hf_value_head`), so on the same folder both engines start from the same
weights and give the same values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from hybridrl.workers.megatron import weights
from hybridrl.workers.megatron.engine import MegatronModel, build_megatron_model
from hybridrl.workers.megatron.model import load_hf_value_head, trunk_of
from hybridrl.workers.megatron.worker import compute_dtype

__all__ = ["build_value_model", "export_value_model_hf_weights"]


def build_value_model(model_config: Any, megatron_config: Any, section: str, device_name: str, *,
                      trainable: bool) -> MegatronModel:
    """This rank's value model (call :func:`init_megatron_parallel` first).

    Args:
        model_config: the ``critic.model`` / ``reward_model.model`` section (``path``, ``override_config``,
            ``trust_remote_code``).
        megatron_config: the matching ``megatron`` section (parallel sizes, ``use_mbridge``, ...).
        section: the megatron section's dotted path, for messages (``critic.megatron``).
        device_name: ``cpu`` or ``cuda`` (bf16 parameters on GPU, fp32 on CPU, as the policy worker).
        trainable: wrap in megatron-core DDP for an optimizer (critic) or freeze (reward model).
    """
    head, hf_config = load_hf_value_head(model_config)
    return build_megatron_model(model_config.path, hf_config, megatron_config, compute_dtype(device_name), device_name,
                                trainable=trainable, value_head=head, section=section)


def export_value_model_hf_weights(model: MegatronModel) -> Iterator[tuple[str, torch.Tensor]]:
    """``(HF name, full tensor)`` of a value model in the token-classification layout (collective over TP): the
    trunk's ``model.*`` through the model's converter, then ``score.weight [1, H]`` and ``score.bias [1]``."""
    trunk = trunk_of(model.gpt)
    if model.bridge is not None:
        from hybridrl.workers.megatron.bridge import iter_hf_weights_mbridge

        yield from iter_hf_weights_mbridge(model.bridge, trunk)
    else:
        yield from weights.iter_hf_weights(trunk, model.hf_config)
    head = model.gpt.output_layer
    yield "score.weight", head.weight.detach()
    yield "score.bias", head.bias.detach()
