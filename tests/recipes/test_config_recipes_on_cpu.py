"""The config-only recipes: each YAML composes with the CPU settings, validates, selects its algorithm, and the
driver-side math it selects gives the hand-computed numbers on one fake batch.

Fake batch (n = 4 responses per prompt, R = 3, score s_i on the last valid token):

    uid        a    a    a    a  |  b    b    b    b
    length     3    2    3    1  |  3    3    2    3        Σ length = 20
    s_i        1    0    0    1  |  2    2    0    0        group means 0.5 | 1.0
    s_i − μ   .5  −.5  −.5   .5  |  1    1   −1   −1
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from hybridrl.config import validate_config
from hybridrl.protocol import DataProto
from hybridrl.recipes.config import compose_recipe_config
from hybridrl.trainer.ppo.batch_advantage import compute_advantage
from hybridrl.trainer.ppo.core_algos import get_policy_loss_fn

RECIPES = Path(__file__).resolve().parents[2] / "hybridrl" / "recipes"
LENGTHS = [3, 2, 3, 1, 3, 3, 2, 3]
SCORES = [1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.0, 0.0]
CENTRED = torch.tensor([0.5, -0.5, -0.5, 0.5, 1.0, 1.0, -1.0, -1.0])


def cpu_overrides(model_dir: str, data_dir: str) -> list[str]:
    """hybridrl/recipes/common_cpu.sh's CPU_ARGS with the test's model and data."""
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/test.parquet",
        "data.train_batch_size=8", "data.max_prompt_length=64", "data.max_response_length=8",
        "data.dataloader_num_workers=0", f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16", "trainer.device=cpu",
        "trainer.n_gpus_per_node=2", "trainer.nnodes=1",
    ]


def fake_batch() -> DataProto:
    mask = torch.tensor([[1] * n + [0] * (3 - n) for n in LENGTHS], dtype=torch.float32)
    scores = torch.zeros(8, 3)
    scores[torch.arange(8), torch.tensor(LENGTHS) - 1] = torch.tensor(SCORES)
    return DataProto.from_dict(
        tensors={"token_level_scores": scores, "token_level_rewards": scores.clone(), "response_mask": mask,
                 "values": torch.zeros(8, 3), "row": torch.arange(8),
                 "reward_baselines": torch.tensor([0.5] * 4 + [1.0] * 4)},  # ReMax: greedy rewards per prompt
        non_tensors={"uid": np.array(["a"] * 4 + ["b"] * 4, dtype=object)},
    )


def advantages(config) -> tuple[DataProto, torch.Tensor]:
    """The trainer's advantage stage (stages.py) on the fake batch; returns (batch, per-sequence A at token 0)."""
    algo = config.algorithm
    torch.manual_seed(0)
    data = compute_advantage(fake_batch(), adv_estimator=algo.adv_estimator, gamma=algo.gamma, lam=algo.lam,
                             num_repeat=4, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, config=algo)
    return data, data.batch["advantages"][:, 0]


def policy_loss(config, data: DataProto, log_prob: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The actor's policy loss (dp_actor) with old_log_probs = 0 and the given current log-probs."""
    actor = config.actor_rollout_ref.actor
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    return loss_fn(torch.zeros(8, 3), log_prob, data.batch["advantages"], data.batch["response_mask"],
                   actor.loss_agg_mode, actor)


# ---------------------------------------------------------------------------------------------------- checks
def check_drgrpo(config) -> None:
    data, adv = advantages(config)
    torch.testing.assert_close(adv, CENTRED)  # no division by the group std
    # ratio 1 → token loss −A; seq-mean-token-sum-norm = Σ_i Σ_t (−A_i)·m_it / (B · R)   (verl 0.9: B = 8 rows)
    # Σ A_i·L_i = 1.5 − 1 − 1.5 + .5 + 3 + 3 − 2 − 3 = 0.5 → loss = −0.5 / (8 · 3)
    pg_loss = policy_loss(config, data, torch.zeros(8, 3))[0]
    torch.testing.assert_close(pg_loss, torch.tensor(-0.5 / 24))


def check_rloo(config) -> None:
    _, adv = advantages(config)
    torch.testing.assert_close(adv, CENTRED * 4 / 3)  # s_i − mean of the other 3 = n/(n−1)·(s_i − μ)


def check_remax(config) -> None:
    _, adv = advantages(config)
    torch.testing.assert_close(adv, CENTRED)  # return-to-go s_i minus the greedy baseline (0.5 | 1.0)


def _whitened(data: DataProto) -> torch.Tensor:
    mask = data.batch["response_mask"].bool()
    values = data.batch["advantages"][mask]
    torch.testing.assert_close(values.mean(), torch.tensor(0.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(values.std(), torch.tensor(1.0), atol=1e-4, rtol=0)  # whitened over the batch
    return values


def check_reinforce_pp(config) -> None:
    data, adv = advantages(config)
    _whitened(data)
    # γ = 1: the return of every valid token is s_i; whitening keeps the order 2 > 1 > 0
    assert adv[4] > adv[0] > adv[1]


def check_reinforce_pp_baseline(config) -> None:
    data, adv = advantages(config)
    _whitened(data)
    assert torch.equal(torch.sign(adv), torch.sign(CENTRED))  # group baseline first, then whitening


def check_gspo(config) -> None:
    data, _ = advantages(config)
    # sequence 0 (A > 0) has log-ratio 0.01 on every token → s_0 = e^0.01 ≈ 1.01 > 1 + 0.0004: clipped
    log_prob = torch.zeros(8, 3)
    log_prob[0] = 0.01
    _, metrics = policy_loss(config, data, log_prob)  # verl 0.9's (loss, metrics)
    assert metrics["actor/pg_clipfrac"] > 0
    assert config.actor_rollout_ref.actor.clip_ratio_high == 0.0004


def check_gpg(config) -> None:
    data, adv = advantages(config)
    torch.testing.assert_close(adv, CENTRED * 2)  # α = B / #(s ≠ 0) = 8 / 4
    # −A·log π with log π = −1: token-mean = Σ_i A_i·L_i / Σ L = 2 · 0.5 / 20 = 0.05
    pg_loss = policy_loss(config, data, -torch.ones(8, 3))[0]
    torch.testing.assert_close(pg_loss, torch.tensor(0.05))


def check_pf_ppo(config) -> None:
    data, _ = advantages(config)
    assert len(data) == 8  # resampled to the same size, with replacement
    rows = data.batch["row"].tolist()
    # weights |s|^2 (+1e-8): rows scoring 0 (1, 2, 6, 7) are all but never drawn; score 2 rows weigh 4× score 1
    assert set(rows) <= {0, 3, 4, 5}, rows


CASES = {
    "drgrpo/drgrpo_trainer": ({"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False,
                               "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
                               "actor_rollout_ref.actor.use_kl_loss": False}, check_drgrpo),
    "rloo/rloo_trainer": ({"algorithm.adv_estimator": "rloo", "algorithm.use_kl_in_reward": True}, check_rloo),
    "remax/remax_trainer": ({"algorithm.adv_estimator": "remax"}, check_remax),
    "reinforce_pp/reinforce_pp_trainer": ({"algorithm.adv_estimator": "reinforce_plus_plus",
                                           "actor_rollout_ref.actor.kl_loss_type": "mse"}, check_reinforce_pp),
    "reinforce_pp/reinforce_pp_baseline_trainer": ({"algorithm.adv_estimator": "reinforce_plus_plus_baseline"},
                                                   check_reinforce_pp_baseline),
    "gspo/gspo_trainer": ({"actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
                           "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean"}, check_gspo),
    "gpg/gpg_trainer": ({"algorithm.adv_estimator": "gpg", "actor_rollout_ref.actor.policy_loss.loss_mode": "gpg",
                         "actor_rollout_ref.actor.use_kl_loss": False}, check_gpg),
    "pf_ppo/pf_ppo_trainer": ({"algorithm.adv_estimator": "gae", "algorithm.use_pf_ppo": True,
                               "algorithm.pf_ppo.reweight_method": "pow"}, check_pf_ppo),
}


@pytest.mark.parametrize("recipe", sorted(CASES))
def test_recipe_config_validates_selects_its_algorithm_and_computes(recipe, tiny_model_dir, recipe_data_dir):
    folder, config_name = recipe.split("/")
    overrides = cpu_overrides(tiny_model_dir, recipe_data_dir)
    if folder == "pf_ppo":
        overrides += [f"critic.model.path={tiny_model_dir}", "critic.ppo_micro_batch_size_per_gpu=8"]
    config = compose_recipe_config(RECIPES / folder / "config", config_name, overrides)
    validate_config(config)  # raises ConfigError listing every problem
    expected, check = CASES[recipe]
    for key, value in expected.items():
        assert OmegaConf.select(config, key) == value, key
    check(config)
