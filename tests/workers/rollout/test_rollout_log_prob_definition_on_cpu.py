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


def test_continuous_batching_rows_report_untruncated_log_probs_at_their_own_temperature():
    """hf async server (``hf_batcher.sample_rows``): rows with different temperature/top-k/top-p in one batch."""
    from types import SimpleNamespace

    from hybridrl.generation.records import SamplingParams
    from hybridrl.workers.rollout.async_server.hf_batcher import sample_rows

    def row(temperature: float, top_k: int, top_p: float):
        sampling = SamplingParams(
            temperature=temperature, top_k=top_k, top_p=top_p, do_sample=temperature > 0, max_new_tokens=4, n=1,
            ignore_eos=False, eos_token_ids=(0,), pad_token_id=0, calculate_log_probs=True,
        )
        request = SimpleNamespace(params=SimpleNamespace(sampling=sampling))
        return SimpleNamespace(request=request, generator=None, token_ids=[])

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    rows = [row(0.7, 3, 1.0), row(1.3, -1, 0.5), row(0.0, -1, 1.0)]  # T_lp: 0.7, 1.3, greedy → 1
    tokens, log_probs = sample_rows(logits, rows, torch.Generator().manual_seed(1))
    expected = [torch.log_softmax(logits[i] / t, -1)[tokens[i]] for i, t in enumerate((0.7, 1.3, 1.0))]
    torch.testing.assert_close(log_probs, torch.stack(expected), atol=1e-6, rtol=0)
    assert int(tokens[0]) in logits[0].topk(3).indices.tolist()  # top-k shaped the sampling
    assert int(tokens[2]) == int(logits[2].argmax())
