"""Helpers shared by the rollout tests: configs, left-padded prompt batches, reference log-probs."""

from __future__ import annotations

import torch
from config_testlib import compose_section

from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask

QUESTIONS = ["What is 1 + 2?", "Compute 12 * 3 please", "hello", "What is the sum of 7 and 8 and 9?"]


def rollout_config(**overrides):
    """The shipped ``actor_rollout_ref.rollout`` section for tests: hf engine, fp32 (so log-probs compare tightly),
    short prompts/responses, rollout log-probs on, a 1 MB weight-sync bucket, TP 1, sampling seed 0, vLLM eager."""
    values = {
        "name": "hf",
        "response_length": 8,
        "prompt_length": 32,
        "dtype": "float32",
        "calculate_log_probs": True,
        "update_weights_bucket_megabytes": 1,
        "tensor_model_parallel_size": 1,  # one process per engine on CPU (the YAML says 2, as verl)
        # verl 0.5's defaults these tests were written against (verl 0.9: seed 42, vLLM compiles / captures graphs)
        "seed": 0,
        "enforce_eager": True,
        **overrides,
    }
    return compose_section("actor_rollout_ref.rollout", **values)


def model_config(path, **overrides):
    """The shipped ``actor_rollout_ref.model`` section for the model at ``path``."""
    return compose_section("actor_rollout_ref.model", path=path, **overrides)


def make_prompts(tokenizer, questions=QUESTIONS, **meta) -> DataProto:
    """Chat-templated, left-padded ``input_ids/attention_mask/position_ids [B, P]`` (+ a uid column)."""
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    mask = enc["attention_mask"]
    return DataProto.from_dict(
        tensors={
            "input_ids": enc["input_ids"],
            "attention_mask": mask,
            "position_ids": compute_position_id_with_mask(mask),
        },
        non_tensors={"uid": [f"q{i}" for i in range(len(questions))]},
        meta_info=dict(meta),
    )


def redrawn_tiny_model(model_dir, dtype: torch.dtype = torch.float32):
    """The tiny model (eval mode, in ``dtype``) with its matrices redrawn at std 0.3: at the saved init (std 0.02)
    greedy decoding repeats one token, which would make equality checks of decodes weak."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model.to(dtype)


def build_handle(tiny_model_dir, tokenizer, actor, **overrides):
    from hybridrl.workers.sharding_manager import build_rollout_handle

    return build_rollout_handle(
        rollout_config(**overrides),
        model_config(tiny_model_dir),
        tokenizer=tokenizer,
        hf_config=actor.config,
        actor_module=actor,
        device_name="cpu",
    )


def forward_log_probs(model, output: DataProto, temperature: float) -> torch.Tensor:
    """Log-probs ``[B, R]`` of the responses under a plain full forward at ``temperature``."""
    batch = output.batch
    response_length = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.float()
    logits = logits[:, -response_length - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def actor_log_probs(model, output: DataProto, temperature: float) -> torch.Tensor:
    """The trainer's log-probs ``[B, R]`` of the generated responses: ``DataParallelPPOActor.compute_log_prob``
    (the code the FSDP worker runs, here on the plain module) at ``temperature``."""
    from hybridrl.workers.actor import DataParallelPPOActor

    config = compose_section("actor_rollout_ref.actor", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4)
    actor = DataParallelPPOActor(config, model, temperature=temperature)
    batch = output.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses"])
    batch.meta_info.update(micro_batch_size=4, use_dynamic_bsz=False, max_token_len=4096)
    log_probs, _ = actor.compute_log_prob(batch)
    return log_probs
