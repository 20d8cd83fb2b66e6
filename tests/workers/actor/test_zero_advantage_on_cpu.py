"""The update leaves out rows whose advantages are all 0 (``zero_advantage.py``): the same gradient, loss and
metrics as running every row, under every loss aggregation, fixed and token-budget micro-batches, FSDP2 on one
and two gloo ranks; and it stays off where another loss term needs every row."""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.zero_advantage import (
    SKIPPED_FRACTION_METRIC,
    SkippedRows,
    drop_zero_advantage_rows,
    skips_zero_advantage_rows,
    zero_advantage_rows,
)
from tests.workers.actor.conftest import actor_config, make_ppo_batch
from tests.workers.engine.engine_testlib import fsdp_config, single_rank_group

AGG_MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def test_zero_advantage_rows_by_hand():
    advantages = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    response_mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0], [1, 0, 0]])
    # row 0: zeros on its tokens; row 1: one non-zero; row 2: no response token (kept: verl's 0/0 stays);
    # row 3: its non-zero advantage sits on padding, so its tokens' advantages are all 0; row 4: zero
    assert zero_advantage_rows(advantages, response_mask).tolist() == [True, False, False, True, True]


def test_metrics_rescaled_by_hand():
    skipped = SkippedRows(rows=4, kept_rows=1, tokens=10, kept_tokens=4)
    metrics = {"actor/pg_loss": 2.0, "actor/pg_clipfrac": 0.5, "actor/ppo_kl": 0.1, "actor/pg_clipfrac_lower": 0.25}
    out = skipped.rescale_metrics(metrics)
    # pg_loss is normalised by the mini-batch's global counts: already the whole micro-batch's (kept as is);
    # the token means × kept_tokens / tokens = 4 / 10; skipped share = 1 − 1/4
    assert out == pytest.approx({"actor/pg_loss": 2.0, "actor/pg_clipfrac": 0.2, "actor/ppo_kl": 0.04,
                                 "actor/pg_clipfrac_lower": 0.1, SKIPPED_FRACTION_METRIC: 0.75})


def test_drop_keeps_one_row_when_every_row_is_skipped():
    data = make_ppo_batch(batch_size=4)
    data.batch["advantages"].zero_()
    kept, skipped = drop_zero_advantage_rows(data.batch)
    assert kept.batch_size[0] == 1 and skipped == SkippedRows(rows=4, kept_rows=0, tokens=int(
        data.batch["response_mask"].sum()), kept_tokens=0)
    untouched, none = drop_zero_advantage_rows(make_ppo_batch(batch_size=4).batch)  # randn advantages: no zero row
    assert none is None and untouched.batch_size[0] == 4


def _batch_with_zero_rows(seed: int = 0, zero_rows=(1, 2, 4, 5, 6, 7)):
    """8 rows; rows ``zero_rows`` get advantage 0 (with micro-batches of 4: half of the first, all of the second)."""
    data = make_ppo_batch(batch_size=8, seed=seed)
    data.batch["advantages"][list(zero_rows)] = 0.0
    return data


def _update(model, config, data, lr=0.1):
    """One update of a copy of ``model`` under SGD (Adam's first step, ``g / |g|``, would magnify the float noise
    of near-zero gradient entries; SGD's step compares the gradients themselves)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    metrics = DataParallelPPOActor(config, model, optimizer).update_policy(data)
    return model, metrics


def _rows_run(monkeypatch) -> list[int]:
    """Rows of each micro-batch that reached the model's forward (recorded into the returned list)."""
    import hybridrl.workers.actor.dp_actor as dp_actor

    seen: list[int] = []
    original = dp_actor.forward_response

    def counting(module, micro_batch, *args, **kwargs):
        seen.append(int(micro_batch["input_ids"].shape[0]))
        return original(module, micro_batch, *args, **kwargs)

    monkeypatch.setattr(dp_actor, "forward_response", counting)
    return seen


def _assert_same(reference, other, moved_atol=1e-6):
    (model_a, metrics_a), (model_b, metrics_b) = reference, other
    assert metrics_b["actor/grad_norm"] == pytest.approx(metrics_a["actor/grad_norm"], rel=1e-5)
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower"):
        assert metrics_b[key] == pytest.approx(metrics_a[key], rel=1e-5, abs=1e-7), key
    diff = max((a - b).abs().max().item() for a, b in zip(model_a.parameters(), model_b.parameters()))
    assert diff < moved_atol


@pytest.mark.parametrize("agg", AGG_MODES)
def test_update_without_zero_rows_equals_every_row(causal_lm, monkeypatch, agg):
    """Off-policy ratios (old log-probs 0, so clipping is active): the same grad norm, weights and loss/clip
    metrics; rows 1, 2 of the first micro-batch stay out and the second, all zero, does not run."""
    data = _batch_with_zero_rows()
    sizes = {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 4, "loss_agg_mode": agg}
    every_row = _update(causal_lm, actor_config(skip_zero_advantage_rows=False, **sizes), data)
    rows_run = _rows_run(monkeypatch)
    skipping = _update(causal_lm, actor_config(**sizes), data)
    assert rows_run == [2]
    assert skipping[1][SKIPPED_FRACTION_METRIC] == [0.5, 1.0]
    assert SKIPPED_FRACTION_METRIC not in every_row[1]
    assert max(every_row[1]["actor/pg_clipfrac"]) > 0  # clipping is exercised
    _assert_same(every_row, skipping)


def test_a_zero_first_micro_batch_still_runs_so_adam_steps_as_before(causal_lm, monkeypatch):
    """Every row zero: one row of the first micro-batch runs (zero loss) so the gradients exist and AdamW's weight
    decay applies as in the every-row update; the second micro-batch does not run."""
    data = _batch_with_zero_rows(zero_rows=range(8))
    sizes = {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 4}
    results = {}
    for skip in (False, True):
        rows_run = _rows_run(monkeypatch)
        model = copy.deepcopy(causal_lm)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        config = actor_config(skip_zero_advantage_rows=skip, **sizes)
        results[skip] = model, DataParallelPPOActor(config, model, optimizer).update_policy(data), list(rows_run)
    assert results[False][2] == [4, 4] and results[True][2] == [1]
    assert results[True][1]["actor/pg_loss"] == results[False][1]["actor/pg_loss"] == [0.0]  # one per mini-batch
    moved = max((a - b).abs().max().item() for a, b in zip(results[False][0].parameters(), causal_lm.parameters()))
    assert moved > 1e-4  # weight decay moved the weights
    diff = max((a - b).abs().max().item() for a, b in zip(results[False][0].parameters(), results[True][0].parameters()))
    assert diff == 0.0


def test_token_budget_micro_batches(causal_lm, monkeypatch):
    data = _batch_with_zero_rows(seed=3, zero_rows=(0, 3, 5))
    sizes = {"ppo_mini_batch_size": 8, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 30}
    every_row = _update(causal_lm, actor_config(skip_zero_advantage_rows=False, **sizes), data)
    rows_run = _rows_run(monkeypatch)
    skipping = _update(causal_lm, actor_config(**sizes), data)
    assert len(rows_run) > 1 and sum(rows_run) == 5
    _assert_same(every_row, skipping)


def test_on_policy_ppo_kl_is_the_whole_micro_batch(causal_lm):
    """Old log-probs of the current weights: ppo_kl over all tokens equals the one over the kept rows rescaled."""
    data = _batch_with_zero_rows(zero_rows=(0, 5))
    sizes = {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 4}
    probe = DataParallelPPOActor(actor_config(**sizes), copy.deepcopy(causal_lm))
    data.meta_info.update(micro_batch_size=4, use_dynamic_bsz=False)
    data.batch["old_log_probs"] = probe.compute_log_prob(data)[0] + 0.01  # near on-policy, not bit-equal
    every_row = _update(causal_lm, actor_config(skip_zero_advantage_rows=False, **sizes), data)
    skipping = _update(causal_lm, actor_config(**sizes), data)
    _assert_same(every_row, skipping)
    # the skipped rows' tokens carry kl = old - new = 0.01 in the full run, 0 when skipped
    tokens = data.batch["response_mask"]
    for micro, row in ((0, 0), (1, 5)):
        share = tokens[row].sum() / tokens[micro * 4 : micro * 4 + 4].sum()
        expected = every_row[1]["actor/ppo_kl"][micro] - 0.01 * float(share)
        assert skipping[1]["actor/ppo_kl"][micro] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("override", [
    {"entropy_coeff": 0.01}, {"use_kl_loss": True}, {"policy_loss": {"loss_mode": "gpg"}},
    {"skip_zero_advantage_rows": False},
], ids=["entropy", "kl_loss", "gpg", "off"])
def test_every_row_runs_where_another_term_needs_it(causal_lm, monkeypatch, override):
    data = _batch_with_zero_rows()
    rows_run = _rows_run(monkeypatch)
    _, metrics = _update(causal_lm, actor_config(ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4, **override),
                         data)
    assert rows_run == [4, 4] and SKIPPED_FRACTION_METRIC not in metrics


def test_bypass_mode_runs_every_row():
    config = actor_config()
    assert skips_zero_advantage_rows(config)
    assert not skips_zero_advantage_rows(config, bypass_mode=True)


def _fsdp2_states(model_dir: str, data) -> dict:
    """``{skip: full state dict}`` after one FSDP2 update (8 rows, micro-batches of 4) without and with skipping."""
    from hybridrl.workers.engine import apply_fsdp, get_full_state_dict, load_hf_model

    states = {}
    for skip in (False, True):
        torch.manual_seed(0)
        module, _ = load_hf_model(model_dir)
        module = apply_fsdp(module, fsdp_config(), strategy="fsdp2")
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
        config = actor_config(ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4, skip_zero_advantage_rows=skip)
        DataParallelPPOActor(config, module, optimizer).update_policy(data)
        states[skip] = get_full_state_dict(module)
    return states


def test_fsdp2_update_equals_every_row(tiny_model_dir):
    """One gloo rank, FSDP2, a micro-batch with every row skipped: the same weights as running every row."""
    with single_rank_group():
        states = _fsdp2_states(tiny_model_dir, _batch_with_zero_rows())
    for name, value in states[False].items():
        torch.testing.assert_close(states[True][name], value, rtol=0, atol=1e-6)


def _two_rank_update(rank: int, world_size: int, model_dir: str, both: bool) -> dict:
    """Rank 0's second micro-batch is all zero-advantage rows; rank 1's rows all count (``both``: its second
    micro-batch is zero too). The ranks run different row counts but the same micro-batches (the second runs on
    both ranks, or with ``both`` on neither), so FSDP2's collectives stay paired."""
    zero_rows = (1, 2, 4, 5, 6, 7) if rank == 0 else ((0, 4, 5, 6, 7) if both else ())
    return _fsdp2_states(model_dir, _batch_with_zero_rows(seed=rank, zero_rows=zero_rows))


@pytest.mark.slow
@pytest.mark.parametrize("both", [False, True], ids=["one_rank_zero", "both_ranks_zero"])
def test_two_rank_fsdp2_update_equals_every_row(tiny_model_dir, both):
    from tests.workers.engine.engine_testlib import run_ranks

    results = run_ranks(_two_rank_update, 2, tiny_model_dir, both)
    for name, value in results[0][False].items():
        torch.testing.assert_close(results[0][True][name], value, rtol=0, atol=1e-6)
        torch.testing.assert_close(results[1][True][name], value, rtol=0, atol=1e-6)
