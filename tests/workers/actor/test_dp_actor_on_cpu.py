"""DataParallelPPOActor on a tiny Qwen2 model in one process (plain module, fp32, CPU)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from hybridrl.workers.actor import DataParallelPPOActor

RESPONSE_LEN = 5


def _hf_response_log_probs(model, batch, temperature: float = 1.0) -> torch.Tensor:
    """Reference: plain HF forward, full log_softmax, gather the response tokens. → [B, R]."""
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits
    logits = logits[:, -RESPONSE_LEN - 1 : -1] / temperature
    return torch.gather(F.log_softmax(logits, dim=-1), -1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def _log_prob_meta(data, micro_batch_size=2, temperature=1.0, use_dynamic_bsz=False, max_token_len=None):
    data.meta_info.update(
        micro_batch_size=micro_batch_size,
        temperature=temperature,
        use_dynamic_bsz=use_dynamic_bsz,
        max_token_len=max_token_len,
    )
    return data


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_compute_log_prob_equals_plain_hf_forward(causal_lm, make_batch, make_actor_config, temperature):
    data = _log_prob_meta(make_batch(batch_size=5), micro_batch_size=2, temperature=temperature)  # 3 micro-batches
    actor = DataParallelPPOActor(make_actor_config(), causal_lm)
    log_probs, entropys = actor.compute_log_prob(data)
    expected = _hf_response_log_probs(causal_lm, data.batch, temperature)
    assert entropys is None
    assert log_probs.shape == (5, RESPONSE_LEN)
    mask = data.batch["response_mask"].bool()
    assert not bool(mask.all())  # rows end at different lengths: some positions are padding
    # valid tokens match; columns that are padding in a whole micro-batch are skipped (0), like packed ones
    torch.testing.assert_close(log_probs[mask], expected[mask], rtol=1e-5, atol=1e-5)


def test_packed_log_probs_and_entropy_equal_padded(causal_lm, make_batch, make_actor_config):
    data = _log_prob_meta(make_batch(batch_size=4), micro_batch_size=4)
    mask = data.batch["response_mask"].bool()
    padded = DataParallelPPOActor(make_actor_config(use_remove_padding=False), causal_lm)
    packed = DataParallelPPOActor(make_actor_config(use_remove_padding=True), causal_lm)
    lp_pad, ent_pad = padded.compute_log_prob(data, calculate_entropy=True)
    lp_packed, ent_packed = packed.compute_log_prob(data, calculate_entropy=True)
    # positions outside the response mask differ by construction (pad-token scores vs zeros)
    torch.testing.assert_close(lp_packed[mask], lp_pad[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_packed[mask], ent_pad[mask], rtol=1e-5, atol=1e-5)
    # entropy of a softmax over V=512 tokens lies in (0, log 512 ≈ 6.238]
    assert bool((ent_pad[mask] > 0).all()) and bool((ent_pad[mask] <= torch.log(torch.tensor(512.0)) + 1e-4).all())


# the CPU log-prob pass without entropy runs the blocked helpers (token_logprobs, token_sum_pi_squared); with
# entropy it runs the unfused float32 ops; packing changes the forward, not the per-token math
@pytest.mark.parametrize("use_remove_padding, calculate_entropy", [(False, False), (True, True)])
def test_sum_pi_squared_equals_softmax_squared_at_the_temperature(
    causal_lm, make_batch, make_actor_config, use_remove_padding, calculate_entropy
):
    temperature = 0.7
    data = _log_prob_meta(make_batch(batch_size=5), micro_batch_size=2, temperature=temperature)  # 3 micro-batches
    actor = DataParallelPPOActor(make_actor_config(use_remove_padding=use_remove_padding), causal_lm)
    outputs = actor.compute_token_outputs(data, calculate_entropy, calculate_sum_pi_squared=True)
    assert set(outputs) == {"log_probs", "sum_pi_squared"} | ({"entropys"} if calculate_entropy else set())
    with torch.no_grad():
        batch = data.batch
        logits = causal_lm(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[:, -RESPONSE_LEN - 1 : -1]
    expected = torch.softmax(logits / temperature, dim=-1).pow(2).sum(-1)  # Σ_v π(v)² per response token
    mask = data.batch["response_mask"].bool()
    assert outputs["sum_pi_squared"].shape == (5, RESPONSE_LEN) and outputs["sum_pi_squared"].dtype == torch.float32
    torch.testing.assert_close(outputs["sum_pi_squared"][mask], expected[mask], rtol=1e-5, atol=1e-7)
    # the extra output leaves the log-probs and entropies as they are; without the flag there is no Σπ²
    log_probs, entropys = actor.compute_log_prob(data, calculate_entropy)
    torch.testing.assert_close(outputs["log_probs"], log_probs, rtol=0, atol=0)
    if calculate_entropy:
        torch.testing.assert_close(outputs["entropys"], entropys, rtol=0, atol=0)
    assert "sum_pi_squared" not in actor.compute_token_outputs(data, calculate_entropy)


def _update(model, config, data, lr=1e-3):
    """One update_policy call on a copy of ``model``. Returns (updated model, metrics)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    actor = DataParallelPPOActor(config, model, optimizer)
    metrics = actor.update_policy(data)
    return model, metrics


def _max_param_diff(model_a, model_b) -> float:
    return max((a - b).abs().max().item() for a, b in zip(model_a.parameters(), model_b.parameters()))


def test_one_update_changes_parameters_and_lr_zero_does_not(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    updated, metrics = _update(causal_lm, make_actor_config(), data, lr=1e-3)
    frozen, metrics_lr0 = _update(causal_lm, make_actor_config(), data, lr=0.0)
    assert _max_param_diff(updated, causal_lm) > 1e-5
    assert _max_param_diff(frozen, causal_lm) == 0.0
    assert metrics["actor/grad_norm"][0] > 0
    assert set(metrics) == {
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/pg_clipfrac_lower",
        "actor/grad_norm",
        "actor/zero_adv_skipped_frac",  # hybridrl's: the share of rows left out (zero_advantage.py)
    }


def test_pg_loss_at_ratio_one_is_minus_mean_advantage(causal_lm, make_batch, make_actor_config):
    """With old_log_probs = current log-probs the ratio is 1 everywhere: no clipping, ppo_kl = 0 and
    token-mean pg_loss = −Σ(A·m)/Σm."""
    data = _log_prob_meta(make_batch(batch_size=4), micro_batch_size=4)
    log_probs, _ = DataParallelPPOActor(make_actor_config(), causal_lm).compute_log_prob(data)
    data.batch["old_log_probs"] = log_probs
    _, metrics = _update(causal_lm, make_actor_config(), data, lr=0.0)
    mask = data.batch["response_mask"].float()
    expected = -(data.batch["advantages"] * mask).sum() / mask.sum()
    assert metrics["actor/pg_loss"][0] == pytest.approx(expected.item(), abs=1e-5)
    assert metrics["actor/pg_clipfrac"][0] == 0.0
    assert metrics["actor/ppo_kl"][0] == pytest.approx(0.0, abs=1e-6)


def test_on_policy_update_without_old_log_probs_equals_the_recomputed_path(causal_lm, make_batch, make_actor_config):
    """recompute_old_log_prob=False: the update takes its own log-probs (detached) as the old ones; with one
    mini-batch and one epoch that is exactly the recomputed old_log_probs, so weights and metrics match."""
    data = _log_prob_meta(make_batch(batch_size=4), micro_batch_size=2)
    recomputed = copy.deepcopy(data)
    recomputed.batch["old_log_probs"], _ = DataParallelPPOActor(
        make_actor_config(ppo_micro_batch_size_per_gpu=2), causal_lm
    ).compute_log_prob(recomputed)
    with_old, metrics_old = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=2), recomputed)
    data.batch.pop("old_log_probs")
    skip = make_actor_config(ppo_micro_batch_size_per_gpu=2, recompute_old_log_prob=False)
    without, metrics_skip = _update(causal_lm, skip, data)
    assert _max_param_diff(with_old, causal_lm) > 1e-5
    assert _max_param_diff(without, with_old) < 1e-6
    for name in ("actor/pg_loss", "actor/ppo_kl", "actor/grad_norm"):
        assert metrics_skip[name] == pytest.approx(metrics_old[name], abs=1e-6), name
    with pytest.raises(KeyError, match="recompute_old_log_prob"):
        _update(causal_lm, make_actor_config(), data)


def test_kl_loss_and_entropy_metrics(causal_lm, make_batch, make_actor_config):
    """ref_log_prob = current log-probs → low_var_kl = exp(0) − 0 − 1 = 0; entropy enters only when coeff ≠ 0."""
    data = _log_prob_meta(make_batch(batch_size=4), micro_batch_size=4)
    log_probs, entropys = DataParallelPPOActor(make_actor_config(), causal_lm).compute_log_prob(
        data, calculate_entropy=True
    )
    data.batch["old_log_probs"] = log_probs
    data.batch["ref_log_prob"] = log_probs
    config = make_actor_config(use_kl_loss=True, kl_loss_coef=0.05, entropy_coeff=0.01)
    _, metrics = _update(causal_lm, config, data, lr=0.0)
    assert metrics["actor/kl_loss"][0] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/kl_coef"] == [0.05]
    mask = data.batch["response_mask"].float()
    expected_entropy = (entropys * mask).sum() / mask.sum()  # token-mean
    assert metrics["actor/entropy"][0] == pytest.approx(expected_entropy.item(), rel=1e-5)


def _assert_same_update(reference, other, atol=1e-6):
    """Same mini-batch loss (``actor/pg_loss``: the micro-batches' partial sums added, one per mini-batch), grad
    norm and parameters after the step."""
    (model_a, metrics_a), (model_b, metrics_b) = reference, other
    assert metrics_b["actor/pg_loss"] == pytest.approx(metrics_a["actor/pg_loss"], rel=1e-5, abs=1e-6)
    assert metrics_b["actor/grad_norm"] == pytest.approx(metrics_a["actor/grad_norm"], rel=1e-5)
    assert _max_param_diff(model_a, model_b) < atol


# every mode normalises by the mini-batch's counts, so any split reproduces the full-batch loss (verl 0.9)
AGG = "seq-mean-token-mean"


def test_micro_batch_1_accumulate_4_equals_micro_batch_4(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    one_shot = _update(causal_lm, make_actor_config(loss_agg_mode=AGG, ppo_micro_batch_size_per_gpu=4), data)
    accumulated = _update(causal_lm, make_actor_config(loss_agg_mode=AGG, ppo_micro_batch_size_per_gpu=1), data)
    assert len(accumulated[1]["actor/pg_clipfrac"]) == 4 and len(accumulated[1]["actor/pg_loss"]) == 1
    _assert_same_update(one_shot, accumulated)


def test_token_mean_accumulation_with_equal_lengths(causal_lm, make_batch, make_actor_config):
    """token-mean is micro-batch invariant when every response has the same length (verl 0.5 weights by samples)."""
    data = make_batch(batch_size=4, full_responses=True)
    one_shot = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=4), data)
    accumulated = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=2), data)
    _assert_same_update(one_shot, accumulated)


def test_packed_update_equals_padded(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    padded = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=2), data)
    packed = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=2, use_remove_padding=True), data)
    _assert_same_update(padded, packed, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_blocked_log_probs_update_equals_the_unfused_ops(causal_lm, make_batch, make_actor_config, monkeypatch,
                                                         temperature):
    """The update's log-probs go through ``token_logprobs`` on CPU; the plain fp32 copy + log-softmax gives the
    same loss, gradient norm and weights."""
    import hybridrl.workers.actor.dp_actor as dp_actor
    from hybridrl.utils.torch_functional import logprobs_from_logits

    data = make_batch(batch_size=4)
    data.meta_info["temperature"] = temperature
    calls = []

    def counted(logits, labels, temp):
        calls.append(temp)
        return dp_actor_blocked(logits, labels, temp)

    dp_actor_blocked = dp_actor.token_logprobs
    monkeypatch.setattr(dp_actor, "token_logprobs", counted)
    blocked = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=2), data)
    assert calls == [temperature, temperature]  # one call per micro-batch: the blocked path ran
    monkeypatch.setattr(dp_actor, "token_logprobs", lambda logits, labels, temp: logprobs_from_logits(
        logits.float() / temp, labels))
    unfused = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=2), data)
    _assert_same_update(unfused, blocked, atol=1e-6)


def test_dynamic_bsz_equals_fixed(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4, seed=3)
    fixed = _update(causal_lm, make_actor_config(loss_agg_mode=AGG, ppo_micro_batch_size_per_gpu=4), data)
    # 4 rows of at most 11 tokens; a 16-token budget forces several micro-batches
    dynamic_config = make_actor_config(loss_agg_mode=AGG, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=16)
    dynamic = _update(causal_lm, dynamic_config, data)
    assert len(dynamic[1]["actor/pg_clipfrac"]) > 1
    _assert_same_update(fixed, dynamic)


def test_dynamic_bsz_equal_lengths_same_loss(causal_lm, make_batch, make_actor_config):
    """4 rows of 9-11 tokens under a 22-token budget: 2 micro-batches of 2 rows, reordered by length."""
    data = make_batch(batch_size=4, seed=4, full_responses=True)
    fixed = _update(causal_lm, make_actor_config(ppo_micro_batch_size_per_gpu=4, loss_agg_mode=AGG), data)
    dynamic_config = make_actor_config(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=22, loss_agg_mode=AGG)
    dynamic = _update(causal_lm, dynamic_config, data)
    assert len(dynamic[1]["actor/pg_clipfrac"]) == 2
    _assert_same_update(fixed, dynamic)


def test_dynamic_bsz_log_probs_restore_order(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=6, seed=1)
    actor = DataParallelPPOActor(make_actor_config(), causal_lm)
    fixed, _ = actor.compute_log_prob(_log_prob_meta(data, micro_batch_size=6))
    dynamic, _ = actor.compute_log_prob(_log_prob_meta(data, use_dynamic_bsz=True, max_token_len=20))
    mask = data.batch["response_mask"].bool()  # outside it, values depend on the micro-batch's padding
    torch.testing.assert_close(dynamic[mask], fixed[mask], rtol=1e-5, atol=1e-5)


def test_two_epochs_two_mini_batches_step_four_times(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    config = make_actor_config(ppo_epochs=2, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1)
    _, metrics = _update(causal_lm, config, data)
    # 2 epochs × 2 mini-batches = 4 optimizer steps and mini-batch losses; × 2 micro-batches = 8 clip records
    assert len(metrics["actor/grad_norm"]) == 4
    assert len(metrics["actor/pg_loss"]) == 4 and len(metrics["actor/pg_clipfrac"]) == 8


def test_reference_actor_refuses_update(causal_lm, make_batch, make_actor_config):
    with pytest.raises(RuntimeError, match="reference"):
        DataParallelPPOActor(make_actor_config(), causal_lm).update_policy(make_batch())


def test_non_finite_grad_norm_skips_the_mini_batch_step_and_counts_it(causal_lm, make_batch, make_actor_config):
    """A NaN advantage gives a NaN loss and grad norm: that mini-batch's step is skipped (weights unchanged),
    the skip is counted on the optimizer, and the NaN grad norm is reported in the metrics (verl logs it)."""
    data = make_batch(batch_size=4)
    data.batch["advantages"][0, 0] = float("nan")
    config = make_actor_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=2)  # 2 mini-batches
    model = copy.deepcopy(causal_lm)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    metrics = DataParallelPPOActor(config, model, optimizer).update_policy(data)
    first, second = metrics["actor/grad_norm"]
    assert first != first and second == second and second > 0  # NaN (skipped), then a finite, taken step
    assert optimizer.num_skipped_steps == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert _max_param_diff(model, causal_lm) > 0  # the second mini-batch still stepped
