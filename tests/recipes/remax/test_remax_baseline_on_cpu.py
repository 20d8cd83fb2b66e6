"""ReMax through the trainer's stages with a fake rollout: the baseline is the reward of the greedy response.

The fake rollout answers greedily (``do_sample=False``) with 2 tokens + EOS and samples responses of 1–4 tokens;
``length_reward.py`` pays the decoded length. So every prompt's baseline must equal the greedy string's reward
and the advantage of a sample must be its reward minus that baseline.
"""

from __future__ import annotations

from pathlib import Path

import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.config import compose_recipe_config
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.batch_collection import Rollout
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from tests.recipes.fakes import FakeActorRolloutWG, common_overrides, make_trainer

ROOT = Path(__file__).resolve().parents[3]


def test_remax_baseline_is_the_greedy_responses_reward(tiny_model_dir, recipe_data_dir, tmp_path):
    args = {**common_overrides(tiny_model_dir, recipe_data_dir, tmp_path), "trainer.balance_batch": False,
            "custom_reward_function.path": str(ROOT / "tests/recipes/assets/length_reward.py")}
    config = compose_recipe_config(ROOT / "hybridrl/recipes/remax/config", "remax_trainer",
                                   [f"{k}={v}" for k, v in args.items()])
    trainer = make_trainer(RayPPOTrainer, config, use_ref=True)  # the recipe puts the KL in the reward
    rollout = Rollout(trainer.workers, trainer.settings, trainer.reward_fn, global_steps=1)
    batch, metrics = trainer.batch_collector.collect(
        DataProto.from_single_dict(next(iter(trainer.train_dataloader))), rollout
    )
    wg: FakeActorRolloutWG = trainer.actor_rollout_wg
    # one sampled call (2 prompts × n=2) and one greedy call (2 prompts, do_sample=False)
    assert [len(g) for g in wg.generated] == [4, 2] and wg.generated[1].meta_info["do_sample"] is False
    assert "timing_s/gen_max" in metrics
    greedy_ids = torch.full((FakeActorRolloutWG.GREEDY_LENGTH - 1,), wg.token_id)
    greedy_reward = float(len(trainer.tokenizer.decode(greedy_ids, skip_special_tokens=True)))
    assert greedy_reward > 0
    assert batch.batch["reward_baselines"].tolist() == [greedy_reward] * 4  # per sample, after repeat(n)
    batch, _ = stages.old_log_prob(batch, trainer.actor_rollout_wg, trainer.settings)
    batch, _ = stages.ref_log_prob(batch, trainer.ref_policy_wg)
    batch, metrics = stages.advantage(batch, trainer.settings, trainer.kl_ctrl_in_reward, global_steps=1)
    # zero log-probs → zero KL penalty: A_t = (Σ_t' r_t' − b)·m with the score on the last valid token
    scores = batch.batch["token_level_scores"].sum(-1)
    expected = (scores - greedy_reward)[:, None] * batch.batch["response_mask"]
    torch.testing.assert_close(batch.batch["advantages"], expected)
    assert metrics["actor/reward_kl_penalty"] == 0.0
