"""Run a function on N spawned gloo ranks (each a fresh process: megatron-core's parallel state is global)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hybridrl.utils.ports import free_port

# megatron_config sections for the tests (the keys of actor_rollout_ref.actor.megatron that the engine reads)
def megatron_section(tp_size: int, use_mbridge: bool = False) -> dict[str, Any]:
    return dict(
        tensor_model_parallel_size=tp_size, pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
        context_parallel_size=1, expert_model_parallel_size=1, expert_tensor_parallel_size=None, seed=42,
        sequence_parallel=True, use_distributed_optimizer=True, override_transformer_config={},
        use_mbridge=use_mbridge, param_offload=False, grad_offload=False, optimizer_offload=False,
    )


def _child(rank: int, world_size: int, port: int, fn: Callable[..., dict], args: tuple, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), HYBRIDRL_DEVICE="cpu")
    dist.init_process_group("gloo")
    try:
        result = fn(rank, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable[..., dict], world_size: int, out_dir: Path, *args: Any) -> list[dict]:
    """``fn(rank, *args)`` on ``world_size`` spawned gloo processes; returns each rank's dict of tensors/floats."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mp.spawn(_child, args=(world_size, free_port(), fn, args, str(out_dir)), nprocs=world_size, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=True) for rank in range(world_size)]


# the megatron optimizer keys of verl 0.5's ppo_megatron_trainer.yaml (actor.optim) that ppo_trainer.yaml lacks
_MEGATRON_OPTIM = dict(optimizer="adam", clip_grad=1.0, lr_warmup_init=0.0,
                       lr_decay_steps=None, lr_decay_style="constant", min_lr=0.0)


def policy_config(model_dir: str, tp_size: int, *overrides: str, use_mbridge: bool = False) -> Any:
    """``actor_rollout_ref`` for the tiny model: ppo_trainer.yaml plus verl's Megatron keys (actor/ref.megatron,
    the megatron optimizer keys) and ``strategy=megatron``; weight decay 0 (megatron-core exempts norms and
    biases from it, FSDP's AdamW does not), lr 1e-3, mini-batch 4 of micro-batches of 2."""
    from config_testlib import compose_config
    from omegaconf import OmegaConf

    config = compose_config("ppo_trainer", [
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", "data.train_batch_size=4", *overrides,
    ])
    section = config.actor_rollout_ref
    OmegaConf.set_struct(section, False)
    megatron = megatron_section(tp_size, use_mbridge)
    section.actor.megatron = megatron
    section.ref.megatron = megatron
    section.actor.optim = OmegaConf.merge(section.actor.optim, _MEGATRON_OPTIM)
    return section


def policy_batch(batch_size: int = 4, seed: int = 0) -> Any:
    """Left-padded prompts of 6 and right-padded responses of 5 tokens with the keys the actor reads."""
    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask

    generator = torch.Generator().manual_seed(seed)
    prompt_len, response_len = 6, 5
    input_ids = torch.randint(5, 500, (batch_size, prompt_len + response_len), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(batch_size):
        attention_mask[row, : row % 3] = 0  # left padding of the prompt
        attention_mask[row, prompt_len + response_len - row % 4 :] = 0  # right padding of the response
    response_mask = attention_mask[:, prompt_len:]
    tensors = {
        "input_ids": input_ids, "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "prompts": input_ids[:, :prompt_len], "responses": input_ids[:, prompt_len:], "response_mask": response_mask,
        "advantages": torch.randn(batch_size, response_len, generator=generator) * response_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})
