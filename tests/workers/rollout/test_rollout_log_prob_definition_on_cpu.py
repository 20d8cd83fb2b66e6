"""The hf engines' ``rollout_log_probs`` follow the trainer's definition (docs/rollout-correction.md, engine table).

The trainer's actor (``DataParallelPPOActor.compute_log_prob``, the code the FSDP worker runs, here on the plain
fp32 module) computes ``log_softmax(logits / rollout.temperature)[token]``. Both hf engines (``hf``: hybridrl's
decode loop, ``hf_generate``: ``transformers.generate``) must report exactly that for the tokens they sampled, at
any temperature and with top-k/top-p truncation on (truncation shapes the sampling, not the reported value);
greedy calls (validation with ``val_kwargs.do_sample=False``) report the T = 1 log-probs.

Tolerance: 1e-4 absolute in fp32 (the engine's KV-cache decode and the actor's full forward sum in different
orders); the T = 1 values differ from the tempered ones by more than 100x that, so the check has teeth.
"""

from __future__ import annotations

import pytest
import torch
from config_testlib import compose_section
from rollout_testlib import build_handle, make_prompts

from hybridrl.workers.actor import DataParallelPPOActor

ENGINES = ["hf", "hf_generate"]
RESPONSE_LENGTH = 8
TOLERANCE = 1e-4


def _actor_log_probs(model, output, temperature: float) -> torch.Tensor:
    """The trainer's log-probs ``[B, R]`` of the generated responses (``compute_log_prob`` at ``temperature``)."""
    config = compose_section("actor_rollout_ref.actor", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4)
    actor = DataParallelPPOActor(config, model, temperature=temperature)
    batch = output.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses"])
    batch.meta_info.update(micro_batch_size=4, use_dynamic_bsz=False, max_token_len=4096)
    log_probs, _ = actor.compute_log_prob(batch)
    return log_probs


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_rollout_log_probs_equal_the_actors_at_the_sampling_temperature(
    tiny_model_dir, tokenizer, actor, name, temperature
):
    handle = build_handle(
        tiny_model_dir, tokenizer, actor, name=name, response_length=RESPONSE_LENGTH,
        temperature=temperature, top_k=20, top_p=0.8,
    )
    out = handle.generate_sequences(make_prompts(tokenizer))
    mask = out.batch["attention_mask"][:, -RESPONSE_LENGTH:].bool()
    expected = _actor_log_probs(actor, out, temperature)
    got = out.batch["rollout_log_probs"]
    torch.testing.assert_close(got[mask], expected[mask], atol=TOLERANCE, rtol=0)
    # and not the truncated (renormalised) distribution nor T = 1: those differ by far more than the tolerance
    assert (got[mask] - _actor_log_probs(actor, out, 1.0)[mask]).abs().max() > 100 * TOLERANCE


@pytest.mark.parametrize("name", ENGINES)
def test_greedy_validation_log_probs_are_at_temperature_one(tiny_model_dir, tokenizer, actor, name):
    handle = build_handle(tiny_model_dir, tokenizer, actor, name=name, response_length=RESPONSE_LENGTH, temperature=0.7)
    out = handle.generate_sequences(make_prompts(tokenizer, validate=True))  # val_kwargs: do_sample False
    mask = out.batch["attention_mask"][:, -RESPONSE_LENGTH:].bool()
    torch.testing.assert_close(
        out.batch["rollout_log_probs"][mask], _actor_log_probs(actor, out, 1.0)[mask], atol=TOLERANCE, rtol=0
    )
