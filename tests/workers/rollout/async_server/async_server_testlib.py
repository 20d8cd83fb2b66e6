"""Helpers of the async-server tests: chat prompts as token lists, hf engines and their one-at-a-time reference."""

from __future__ import annotations

import contextlib

import torch
from rollout_testlib import make_prompts, rollout_config

from hybridrl.workers.rollout.async_server import build_async_server
from hybridrl.workers.rollout.hf_rollout import HFRollout

# chat prompts of 10 to 40 tokens with the tiny tokenizer
QUESTIONS = [
    "hello",
    "What is 1 + 2?",
    "Compute 12 * 3 please",
    "What is the sum of 7 and 8 and 9?",
    "solve the question: what is 123 plus 456 minus 78 times 9, think step by step and give the final number",
    "yes or no",
]


def prompt_ids(tokenizer, question: str) -> list[int]:
    """The chat-templated prompt of ``question`` (generation prompt included) as token ids."""
    batch = make_prompts(tokenizer, [question]).batch
    return batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()


def hf_engine(model, tokenizer, *, extra_eos=(), seed=0, **overrides) -> HFRollout:
    """An ``HFRollout`` on ``model`` (fp32 tiny model) with the shipped rollout section + ``overrides``."""
    eos = [tokenizer.eos_token_id, *extra_eos]
    return HFRollout(
        model, rollout_config(**overrides), eos_token_ids=eos, pad_token_id=tokenizer.pad_token_id, seed=seed
    )


@contextlib.contextmanager
def serving(engine):
    """A started async server on ``engine`` (stopped on exit)."""
    server = build_async_server(engine, engine.rollout_config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def one_at_a_time_greedy(engine: HFRollout, tokenizer, question: str, max_tokens: int):
    """``(token_ids, log_probs)`` of ``question`` generated alone by ``engine.generate_sequences`` (greedy)."""
    out = engine.generate_sequences(make_prompts(tokenizer, [question], do_sample=False, response_length=max_tokens))
    mask = out.batch["attention_mask"][0, -max_tokens:].bool()
    return out.batch["responses"][0][mask].tolist(), out.batch["rollout_log_probs"][0][mask]


def top2_margin(model, prompt: list[int], response: list[int]) -> float:
    """Smallest top-1 minus top-2 logit at the positions that chose ``response`` (an argmax-tie detector)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float()
    top = logits[len(prompt) - 1 : len(prompt) + len(response) - 1].topk(2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def spread_weights(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Re-draw every matrix of ``model`` from N(0, std²) (seeded), in place.

    The freshly built tiny model (init std 0.02) greedily repeats one token after every prompt, which would make
    a token-by-token comparison vacuous. With std 0.3 its greedy continuations depend on the context and every
    top-1/top-2 logit margin stays far above fp32 batch-composition noise (the tests check the margins).
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model


def one_at_a_time_greedy_ids(engine: HFRollout, ids: list[int], max_tokens: int):
    """``(token_ids, log_probs)`` of the prompt ``ids`` generated alone by ``engine.generate_sequences`` (greedy)."""
    from hybridrl.protocol import DataProto

    input_ids = torch.tensor([ids])
    prompts = DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "position_ids": torch.arange(len(ids)).unsqueeze(0),
        },
        non_tensors={"uid": ["q0"]},
        meta_info={"do_sample": False, "response_length": max_tokens},
    )
    out = engine.generate_sequences(prompts)
    mask = out.batch["attention_mask"][0, -max_tokens:].bool()
    return out.batch["responses"][0][mask].tolist(), out.batch["rollout_log_probs"][0][mask]
