"""Helpers of the mixture-of-experts tests: a tiny Qwen3-MoE and actor sections with the MoE switches."""

from __future__ import annotations

import copy
import functools

import torch
from config_testlib import compose_section
from omegaconf import open_dict

from hybridrl.models.transformers.moe_router import router_modules

AUX_LOSS_COEF = 0.5


def tiny_qwen3_moe(top_k: int = 2, seed: int = 0):
    """2 MoE layers of 4 experts, fp32, vocab 512, ``router_aux_loss_coef`` 0.5.

    The router weights are drawn wide (std 1) so tokens pick distinct experts and a perturbation moves them."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=top_k,
        norm_topk_prob=True,
        router_aux_loss_coef=AUX_LOSS_COEF,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config).float()
    for router in router_modules(model):
        torch.nn.init.normal_(router.weight, std=1.0)
    return model.eval()


def perturb_routers(model, seed: int = 1):
    """A copy of ``model`` whose router weights moved by N(0, 1) noise (the experts and the rest unchanged)."""
    model = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for router in router_modules(model):
            router.weight.add_(torch.randn(router.weight.shape, generator=gen))
    return model


@functools.cache
def _base_actor_section():
    return compose_section("actor_rollout_ref.actor", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4)


def moe_actor_config(packed: bool = False, aux_loss: bool = False, replay_mode: str = "disabled"):
    """The shipped actor section (composed once: Hydra costs seconds) with the MoE switches set.

    ``router_replay.mode`` is verl 0.9's key, set with ``open_dict`` where the config tree lacks it."""
    config = copy.deepcopy(_base_actor_section())
    with open_dict(config):
        config.use_remove_padding = packed
        config.enable_activation_offload = False
        config.use_router_aux_loss = aux_loss
        config.router_replay = {**config.get("router_replay", {}), "mode": replay_mode}
    return config


def tiny_gpt_oss(seed: int = 0):
    """2 MoE layers of 4 experts (top-2, softmax over the chosen logits), fp32, vocab 512, eager attention."""
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=4,
        router_aux_loss_coef=AUX_LOSS_COEF,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(seed)
    model = GptOssForCausalLM(config).float()
    for router in router_modules(model):
        torch.nn.init.normal_(router.weight, std=1.0)
    return model.eval()
