"""Online-DPO / SPIN recipe configs: composition, DPO checks, and the role mapping the trainer installs."""

from __future__ import annotations

from pathlib import Path

import pytest

import hybridrl.recipes.online_dpo as online_dpo_pkg
import hybridrl.recipes.spin as spin_pkg
from hybridrl.recipes.online_dpo.main_online_dpo import dpo_problems

# the recipe YAMLs find ppo_trainer through pkg://hybridrl.configs, which Hydra loads but calls "not available"
pytestmark = pytest.mark.filterwarnings("ignore:provider=hydra.searchpath")


def _compose(package, name: str, overrides: list[str] = ()):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(package.__file__).parent / "config"), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def test_online_dpo_config_defaults_and_ppo_tree():
    config = _compose(online_dpo_pkg, "online_dpo_trainer")
    assert dict(config.algorithm.dpo) == {"beta": 0.1, "loss_type": "sigmoid", "label_smoothing": 0.0}
    assert config.actor_rollout_ref.rollout.n == 2 and config.critic.enable is False
    assert config.trainer.ref_update_freq == -1
    assert config.actor_rollout_ref.actor.use_kl_loss is False
    assert "ppo_mini_batch_size" in config.actor_rollout_ref.actor  # the rest of ppo_trainer is there
    assert dpo_problems(config, min_responses=2) == []


def test_spin_config_defaults():
    config = _compose(spin_pkg, "spin_trainer")
    assert config.data.response_key == "response" and config.actor_rollout_ref.rollout.n == 1
    assert config.algorithm.dpo.loss_type == "sigmoid"
    assert dpo_problems(config, min_responses=1) == []


def test_dpo_problems_name_every_bad_key():
    config = _compose(
        online_dpo_pkg,
        "online_dpo_trainer",
        [
            "actor_rollout_ref.rollout.n=1",
            "algorithm.dpo.beta=0",
            "algorithm.dpo.loss_type=kto",
            "algorithm.dpo.label_smoothing=0.5",
            "algorithm.use_kl_in_reward=True",
            "critic.enable=True",
        ],
    )
    problems = dpo_problems(config, min_responses=2)
    assert [p.key for p in problems] == [
        "algorithm.dpo.beta",
        "algorithm.dpo.loss_type",
        "algorithm.dpo.label_smoothing",
        "actor_rollout_ref.rollout.n",
        "algorithm.use_kl_in_reward",
        "critic.enable",
    ]
    assert "hinge, ipo, sigmoid" in str(problems[1]) and "rollout.n=2" in problems[3].fix


def test_unknown_dpo_key_is_refused():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="betta"):
        _compose(online_dpo_pkg, "online_dpo_trainer", ["algorithm.dpo.betta=1"])


def test_role_mapping_puts_actor_rollout_and_ref_in_one_dpo_worker():
    from hybridrl.recipes.online_dpo.dpo_trainer import dpo_role_mapping
    from hybridrl.recipes.online_dpo.dpo_worker import DPOActorRolloutRefWorker
    from hybridrl.trainer.ppo.roles import Role

    rm_cls = object()
    workers = {Role.ActorRollout: object(), Role.RefPolicy: object(), Role.RewardModel: rm_cls}
    mapping = {Role.ActorRollout: "global_pool", Role.RefPolicy: "global_pool", Role.RewardModel: "reward_pool"}
    new_workers = dpo_role_mapping(workers, mapping, DPOActorRolloutRefWorker)
    assert set(new_workers) == {Role.ActorRolloutRef, Role.RewardModel} and new_workers[Role.RewardModel] is rm_cls
    assert mapping == {Role.ActorRolloutRef: "global_pool", Role.RewardModel: "reward_pool"}
    with pytest.raises(ValueError, match="critic.enable=False"):
        dpo_role_mapping({Role.ActorRollout: object(), Role.Critic: object()}, {}, DPOActorRolloutRefWorker)


def test_lora_reference_cannot_be_refreshed():
    config = _compose(
        online_dpo_pkg,
        "online_dpo_trainer",
        [
            "actor_rollout_ref.model.lora_rank=8",
            "trainer.ref_update_freq=2",
        ],
    )
    assert [p.key for p in dpo_problems(config, min_responses=2)] == ["trainer.ref_update_freq"]
