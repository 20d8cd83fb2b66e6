"""Run a function on N gloo ranks, each a fresh process (megatron-core's parallel state is global), plus the
configs and batches the Megatron tests share."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hybridrl.utils.ports import free_port


def megatron_section(tp_size: int, use_mbridge: bool = False) -> Any:
    """``actor_rollout_ref.actor.megatron`` of the shipped ppo_megatron_trainer.yaml with this TP size and converter."""
    from config_testlib import compose_section

    return compose_section("actor_rollout_ref.actor.megatron", config_name="ppo_megatron_trainer",
                           tensor_model_parallel_size=tp_size, use_mbridge=use_mbridge)


def _child(rank: int, world_size: int, port: int, fn: Callable[..., dict], args: tuple, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), HYBRIDRL_DEVICE="cpu")
    dist.init_process_group("gloo")
    try:
        result = fn(rank, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


# Imported once by the forkserver, the clean process the ranks are forked from: each rank then starts with torch,
# transformers, megatron-core and the workers loaded instead of importing them again (4-8 s per rank on 2 cores).
# The server itself never runs a torch op or a process group, so each fork is as fresh as a spawned process.
_RANK_PRELOAD = (
    "torch", "torch.distributed", "transformers", "megatron.core", "hybridrl.workers.megatron.worker",
    "hybridrl.workers.megatron.critic_worker", "hybridrl.workers.megatron.reward_model_worker",
    "hybridrl.workers.fsdp_workers", "hybridrl.workers.critic_worker", "hybridrl.workers.reward_model_worker",
)


def run_ranks(fn: Callable[..., dict], world_size: int, out_dir: Path, *args: Any) -> list[dict]:
    """``fn(rank, *args)`` on ``world_size`` fresh gloo processes (forked from a forkserver that preloaded
    ``_RANK_PRELOAD``); returns each rank's dict of tensors/floats."""
    return run_rank_groups((fn, world_size, out_dir, *args))[0]


def run_rank_groups(*groups: tuple) -> list[list[dict]]:
    """Several independent :func:`run_ranks` launches ``(fn, world_size, out_dir, *args)`` at the same time, each
    its own gloo world on its own port: a 1-rank launch beside another keeps the second core busy. Returns each
    group's list of rank results, in order; a failing rank fails the call (its traceback in the error) and the
    other groups' processes are stopped."""
    mp.get_context("forkserver").set_forkserver_preload(list(_RANK_PRELOAD))
    ports: list[int] = []
    while len(ports) < len(groups):
        port = free_port()
        if port not in ports:
            ports.append(port)
    contexts = []
    try:
        for (fn, world_size, out_dir, *args), port in zip(groups, ports):
            out_dir.mkdir(parents=True, exist_ok=True)
            contexts.append(mp.start_processes(_child, args=(world_size, port, fn, tuple(args), str(out_dir)),
                                               nprocs=world_size, join=False, start_method="forkserver"))
        for context in contexts:
            while not context.join():
                pass
    finally:
        for process in (process for context in contexts for process in context.processes):
            if process.is_alive():
                process.terminate()
                process.join()
    return [[torch.load(out_dir / f"rank{rank}.pt", weights_only=True) for rank in range(world_size)]
            for _fn, world_size, out_dir, *_args in groups]


def run_fsdp2_tp1_tp2(fn: Callable[..., dict], out_dir: Path, model_dir: str) -> tuple[dict, dict, list[dict]]:
    """``fn(rank, model_dir, tp_size, strategy)`` as the FSDP2 worker (1 rank), Megatron TP=1 (1 rank) and Megatron
    TP=2 (2 ranks), the three launches at once; returns ``(fsdp2, tp1, [tp2 rank 0, tp2 rank 1])``."""
    fsdp, tp1, tp2 = run_rank_groups((fn, 1, out_dir / "fsdp", model_dir, 1, "fsdp2"),
                                     (fn, 1, out_dir / "tp1", model_dir, 1, "megatron"),
                                     (fn, 2, out_dir / "tp2", model_dir, 2, "megatron"))
    return fsdp[0], tp1[0], tp2


def policy_config(model_dir: str, tp_size: int, *overrides: str, strategy: str = "megatron") -> Any:
    """``actor_rollout_ref`` for the tiny model from the shipped YAML: ``ppo_megatron_trainer`` (TP ``tp_size``) or,
    for ``strategy="fsdp2"``, ``ppo_trainer``. Weight decay 0 (megatron-core exempts norms and biases from it, FSDP's
    AdamW does not), lr 1e-3, one mini-batch of 4 in micro-batches of 2, clip 1.0, the hf rollout."""
    from config_testlib import compose_config

    common = [
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", "data.train_batch_size=4",
        # verl 0.5's defaults these tests were written against (verl 0.9: remove padding on, sampling seed 42)
        "actor_rollout_ref.model.use_remove_padding=False", "actor_rollout_ref.rollout.seed=0", *overrides,
    ]
    if strategy == "megatron":
        config = compose_config("ppo_megatron_trainer", [
            *common, f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={tp_size}",
            # and the Megatron file's (verl 0.9: mbridge on, rollout TP 2, vLLM chunked prefill on)
            "actor_rollout_ref.actor.megatron.use_mbridge=False", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "actor_rollout_ref.rollout.enable_chunked_prefill=False", *overrides])
    else:
        config = compose_config("ppo_trainer", [*common, "actor_rollout_ref.model.enable_gradient_checkpointing=False"])
    return config.actor_rollout_ref


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


def off_policy_update(worker: Any, seed: int) -> None:
    """One ``update_actor`` of a Megatron policy ``worker`` on :func:`policy_batch` with old log-probs shifted off the
    worker's own by 0.01 per response token (ratio ≠ 1: clipping is exercised)."""
    data = policy_batch(seed=seed)
    data.batch["old_log_probs"] = worker.compute_log_prob(data).batch["old_log_probs"] + 0.01 * data.batch["response_mask"]
    worker.update_actor(data)


def greedy_prompts(seed: int) -> Any:
    """The 6-token prompts of :func:`policy_batch` (``input_ids, attention_mask, position_ids``) for greedy decoding."""
    prompts = policy_batch(seed=seed).select(batch_keys=["input_ids", "attention_mask", "position_ids"])
    for key in ("input_ids", "attention_mask", "position_ids"):
        prompts.batch[key] = prompts.batch[key][:, :6]
    prompts.meta_info["do_sample"] = False
    return prompts


def hf_response_log_probs(model_dir: str, data) -> torch.Tensor:
    """log π(response token) ``[B, R]`` under the HF model, padded layout."""
    logits = hf_response_logits(model_dir, data)
    return torch.log_softmax(logits, dim=-1).gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1)


def hf_response_logits(model_dir: str, data) -> torch.Tensor:
    """The HF model's float32 logits that score the response tokens ``[B, R, V]``, padded layout."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    batch = data.batch
    response_len = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits[:, -response_len - 1 : -1]
    return logits.float()


def critic_config(model_dir: str, tp_size: int, strategy: str, *overrides: str):
    """``critic`` for the tiny model from the shipped YAML: ``ppo_megatron_trainer`` (TP ``tp_size``) or, for
    ``strategy="fsdp2"``, ``ppo_trainer``. One mini-batch of 4 in micro-batches of 2, Adam lr 1e-3, weight decay 0
    (megatron-core exempts norms and biases from it, FSDP's AdamW does not)."""
    from config_testlib import compose_config

    common = [
        f"actor_rollout_ref.model.path={model_dir}", f"critic.model.path={model_dir}", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=2",
        "critic.optim.lr=1e-3", "critic.optim.weight_decay=0.0",
        "critic.model.use_remove_padding=False",  # verl 0.5's default these tests were written against (0.9: on)
        *overrides,
    ]
    if strategy == "megatron":
        return compose_config("ppo_megatron_trainer", [
            *common, f"critic.megatron.tensor_model_parallel_size={tp_size}",
            # verl 0.5's Megatron critic (verl 0.9: mbridge, a constant learning rate)
            "critic.megatron.use_mbridge=False", "critic.optim.lr_decay_style=linear", *overrides]).critic
    return compose_config("ppo_trainer", [*common, "critic.model.enable_gradient_checkpointing=False"]).critic


def critic_update_batch(data: Any, values: torch.Tensor) -> Any:
    """``data`` (a :func:`policy_batch`) with the keys ``update_critic`` reads: old ``values`` (the critic's ``values``
    offset per row so that value clipping bites: ``|V − V_old| > cliprange_value = 0.5`` on rows 2 and 3) and
    seeded random ``returns``, both zero outside the response."""
    mask = data.batch["response_mask"]
    offset = torch.tensor([0.0, 0.3, 0.8, -0.8])[:, None]
    data.batch["values"] = (values + offset) * mask
    data.batch["returns"] = torch.randn(values.shape, generator=torch.Generator().manual_seed(3)) * mask
    return data
