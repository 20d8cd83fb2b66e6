"""verl 0.9's global-batch normalisation in the actor and critic: a mini-batch's gradient does not depend on its
micro-batch split, a user loss sees ``config.global_batch_info``, and a verl 0.5-style loss keeps 0.5's weighting."""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.algos.aggregation import GlobalBatchInfo
from hybridrl.trainer.ppo import core_algos
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.global_batch import merge_micro_batch_metrics, mini_batch_info

# make_ppo_batch(4): response lengths 5, 4, 3, 2 → micro-batches of 1 row hold 5, 4, 3 and 2 tokens


def test_mini_batch_info_on_one_rank():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert mini_batch_info(mask, dp_size=1, loss_scale_factor=7.0) == GlobalBatchInfo(1, 3, 3, 7.0)
    with pytest.raises(ValueError, match="does not divide"):
        mini_batch_info(mask, dp_size=2, loss_scale_factor=None)


def test_merge_adds_the_loss_terms_and_keeps_the_rest_per_micro_batch():
    micro = [{"actor/pg_loss": 0.25, "actor/pg_clipfrac": 0.5}, {"actor/pg_loss": 0.5, "actor/pg_clipfrac": 0.0}]
    assert merge_micro_batch_metrics(micro, summed=True) == {"actor/pg_loss": [0.75], "actor/pg_clipfrac": [0.5, 0.0]}
    assert merge_micro_batch_metrics(micro, summed=False) == {
        "actor/pg_loss": [0.25, 0.5],
        "actor/pg_clipfrac": [0.5, 0.0],
    }


def _update(model, config, data):
    """One update of a copy of ``model`` under SGD; returns (model, metrics)."""
    model = copy.deepcopy(model)
    metrics = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=0.1)).update_policy(data)
    return model, metrics


def _max_diff(model_a, model_b) -> float:
    return max((a - b).abs().max().item() for a, b in zip(model_a.parameters(), model_b.parameters()))


@pytest.mark.parametrize("agg", ["token-mean", "token-sum"])
def test_micro_batch_split_does_not_change_the_update(causal_lm, make_batch, make_actor_config, agg):
    """Micro-batches of 1 row (5, 4, 3, 2 tokens) vs one of 4 rows: the same loss, grad norm and weights.
    (verl 0.5 divided each micro-batch by its own tokens: token-mean moved with the split.)"""
    data = make_batch(batch_size=4)
    whole = _update(causal_lm, make_actor_config(loss_agg_mode=agg, ppo_micro_batch_size_per_gpu=4), data)
    split = _update(causal_lm, make_actor_config(loss_agg_mode=agg, ppo_micro_batch_size_per_gpu=1), data)
    assert split[1]["actor/pg_loss"] == pytest.approx(whole[1]["actor/pg_loss"], rel=1e-5)
    assert split[1]["actor/grad_norm"] == pytest.approx(whole[1]["actor/grad_norm"], rel=1e-5)
    assert _max_diff(whole[0], split[0]) < 1e-6


def _legacy_token_mean(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
    """verl 0.5 style: −A·ρ token-mean over its own micro-batch; 4-tuple."""
    loss = core_algos.agg_loss(-advantages * torch.exp(log_prob - old_log_prob), response_mask, "token-mean")
    zero = torch.tensor(0.0)
    return loss, zero, zero, zero


seen_info: list[dict] = []


def _v09_token_mean(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """verl 0.9 style: the same loss, normalised by ``config.global_batch_info``; ``(loss, metrics)``."""
    seen_info.append(dict(config.global_batch_info))
    per_token = -advantages * torch.exp(log_prob - old_log_prob)
    return core_algos.agg_loss(per_token, response_mask, "token-mean", **config.global_batch_info), {"k": 1.0}


@pytest.fixture
def user_losses():
    core_algos.register_policy_loss("test_legacy_tm")(_legacy_token_mean)
    core_algos.register_policy_loss("test_v09_tm")(_v09_token_mean)
    seen_info.clear()
    yield
    for name in ("test_legacy_tm", "test_v09_tm"):
        core_algos.POLICY_LOSS_REGISTRY.pop(name)


def test_a_verl_05_loss_keeps_05_weighting_and_a_09_loss_reads_global_batch_info(
    user_losses, causal_lm, make_batch, make_actor_config
):
    data = make_batch(batch_size=4)

    def run(mode, micro):
        return _update(
            causal_lm, make_actor_config(policy_loss={"loss_mode": mode}, ppo_micro_batch_size_per_gpu=micro), data
        )

    v09_split = run("test_v09_tm", 1)
    # 4 micro-batches, each told the mini-batch's counts: D = 1, N = 5 + 4 + 3 + 2 = 14, G = 4 rows
    assert seen_info == [{"dp_size": 1, "batch_num_tokens": 14, "global_batch_size": 4, "loss_scale_factor": None}] * 4
    assert v09_split[1]["k"] == [1.0] * 4
    legacy_whole, legacy_split = run("test_legacy_tm", 4), run("test_legacy_tm", 1)
    # one micro-batch: weight 1 · own token-mean = the global token-mean, as the 0.9-style loss over any split
    assert _max_diff(legacy_whole[0], v09_split[0]) < 1e-6
    # split in 1-row micro-batches, 0.5's weighting (1/4 each of its own token-mean) gives another update
    legacy_norms = legacy_whole[1]["actor/grad_norm"][0], legacy_split[1]["actor/grad_norm"][0]
    assert abs(legacy_norms[0] - legacy_norms[1]) > 1e-2 * legacy_norms[0]


# ---------------------------------------------------------------------------
# critic
# ---------------------------------------------------------------------------


def test_critic_micro_batch_split_does_not_change_the_update(tiny_model_dir):
    from config_testlib import compose_section

    from hybridrl.workers.critic import DataParallelPPOCritic
    from hybridrl.workers.engine import load_hf_model
    from tests.workers.actor.conftest import make_ppo_batch

    torch.manual_seed(0)
    value_model, _ = load_hf_model(tiny_model_dir, kind="token_classification", torch_dtype=torch.float32)
    data = make_ppo_batch(batch_size=4)
    data.batch["values"] = torch.zeros(4, 5)
    data.batch["returns"] = torch.ones(4, 5) * data.batch["response_mask"]
    results = []
    for micro in (4, 1):
        model = copy.deepcopy(value_model)
        config = compose_section("critic", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=micro)
        config.use_remove_padding = False
        critic = DataParallelPPOCritic(config, model, torch.optim.SGD(model.parameters(), lr=0.1))
        results.append((model, critic.update_critic(data)))
    (whole_model, whole), (split_model, split) = results
    assert len(split["critic/vf_loss"]) == 1 and len(split["critic/vf_clipfrac"]) == 4
    assert split["critic/vf_loss"] == pytest.approx(whole["critic/vf_loss"], rel=1e-5)
    assert _max_diff(whole_model, split_model) < 1e-6
