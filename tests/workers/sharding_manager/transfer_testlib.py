"""Helpers of the weight-transfer tests: the tiny model's PPO config, worker groups on their own pools, prompts."""

from __future__ import annotations

import itertools

import torch
from config_testlib import compose_config, compose_section

from hybridrl.protocol import DataProto

QUESTIONS = ["What is 1 + 2?", "Compute 12 * 3 please", "hello", "What is the sum of 7 and 8 and 9?"]


def policy_config(model_dir: str, *extra: str):
    """``actor_rollout_ref`` of the shipped YAML for the tiny model: hf engine, greedy-friendly short responses,
    rollout log-probs on, 1 MB buckets (the smallest the key allows), TP 1."""
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.prompt_length=32",
        "actor_rollout_ref.rollout.response_length=8",
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "data.train_batch_size=4",
        *extra,
    ]
    config = compose_config("ppo_trainer", overrides)
    return config.actor_rollout_ref


def worker_group(ray, config, role: str, name: str, world_size: int = 1):
    """An initialised ``ActorRolloutRefWorker`` group of ``role`` on a resource pool of its own: ``(pool, group)``."""
    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    pool = RayResourcePool([world_size], use_gpu=False, max_colocate_count=1, name_prefix=name)
    cls = RayClassWithInitArgs(ray.remote(ActorRolloutRefWorker), config=config, role=role)
    group = RayWorkerGroup(pool, cls, device_name="cpu", worker_env={"HYBRIDRL_DEVICE": "cpu"})
    group.init_model()
    return pool, group


def make_prompts(tokenizer, questions=QUESTIONS, **meta) -> DataProto:
    """Chat-templated, left-padded ``input_ids/attention_mask/position_ids [B, P]`` (main_generation's tokenizing)."""
    from hybridrl.trainer.main_generation import tokenize_chats

    prompts = tokenize_chats(tokenizer, [[{"role": "user", "content": q}] for q in questions], prompt_length=32)
    prompts.meta_info.update(meta)
    return prompts


class DictStore:
    """``put`` / ``get`` over a dict, counting puts (stands in for Ray's object store)."""

    def __init__(self) -> None:
        self.objects: dict[int, object] = {}
        self._ids = itertools.count()

    def put(self, obj):
        ref = next(self._ids)
        self.objects[ref] = obj
        return ref

    def get(self, ref):
        return self.objects[ref]


def perturbed_model(model_dir: str, seed: int = 1, scale: float = 0.1):
    """The HF model at ``model_dir`` (fp32) with every weight moved by N(0, scale²): an "actor update"."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    return model.eval()


def standalone_engine(model_dir: str, **rollout_keys):
    """A real engine (``rollout.name`` hf unless given) that loaded ``model.path`` itself, as a rollout-only
    worker's engine does."""
    from transformers import AutoConfig, AutoTokenizer

    from hybridrl.workers.rollout import build_rollout

    # seed 0 and vLLM eager: verl 0.5's defaults these tests were written against (verl 0.9: 42, graphs)
    values = {"name": "hf", "tensor_model_parallel_size": 1, "seed": 0, "enforce_eager": True, **rollout_keys}
    return build_rollout(
        compose_section("actor_rollout_ref.rollout", **values),
        compose_section("actor_rollout_ref.model", path=model_dir),
        tokenizer=AutoTokenizer.from_pretrained(model_dir),
        hf_config=AutoConfig.from_pretrained(model_dir),
        actor_module=None,
        device_name="cpu",
    )
