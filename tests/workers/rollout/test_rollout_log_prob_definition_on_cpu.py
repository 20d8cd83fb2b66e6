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
from rollout_testlib import actor_log_probs, build_handle, make_prompts

ENGINES = ["hf", "hf_generate"]
RESPONSE_LENGTH = 8
TOLERANCE = 1e-4


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
    expected = actor_log_probs(actor, out, temperature)
    got = out.batch["rollout_log_probs"]
    torch.testing.assert_close(got[mask], expected[mask], atol=TOLERANCE, rtol=0)
    # and not the truncated (renormalised) distribution nor T = 1: those differ by far more than the tolerance
    assert (got[mask] - actor_log_probs(actor, out, 1.0)[mask]).abs().max() > 100 * TOLERANCE


@pytest.mark.parametrize("name", ENGINES)
def test_greedy_validation_log_probs_are_at_temperature_one(tiny_model_dir, tokenizer, actor, name):
    handle = build_handle(tiny_model_dir, tokenizer, actor, name=name, response_length=RESPONSE_LENGTH, temperature=0.7)
    out = handle.generate_sequences(make_prompts(tokenizer, validate=True))  # val_kwargs: do_sample False
    mask = out.batch["attention_mask"][:, -RESPONSE_LENGTH:].bool()
    torch.testing.assert_close(
        out.batch["rollout_log_probs"][mask], actor_log_probs(actor, out, 1.0)[mask], atol=TOLERANCE, rtol=0
    )


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "mode"),
    [
        (0.7, -1, 1.0, "processed_logprobs"),  # no truncation: log_softmax(logits / T), exact
        (1.3, -1, 1.0, "processed_logprobs"),
        (1.0, 20, 1.0, "raw_logprobs"),  # truncation at T = 1: raw = untruncated log_softmax(logits), exact
        (1.0, -1, 0.9, "raw_logprobs"),
        (0.7, 20, 0.9, "processed_logprobs"),  # no vLLM mode is exact here: the truncated value, with a warning
    ],
)
def test_vllm_logprobs_mode_follows_the_training_sampling(temperature, top_k, top_p, mode):
    import warnings

    from rollout_testlib import rollout_config

    from hybridrl.workers.rollout.vllm_rollout import vllm_logprobs_mode

    cfg = rollout_config(name="vllm", temperature=temperature, top_k=top_k, top_p=top_p)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert vllm_logprobs_mode(cfg) == mode
    warned = any("truncated distribution" in str(w.message) for w in caught)
    assert warned == (mode == "processed_logprobs" and (top_k > 0 or top_p < 1.0))
