"""Role names and the need_* helpers (verl 0.5 semantics); ResourcePoolManager is tested with Ray in
tests/single_controller/test_failures_on_cpu.py."""

from __future__ import annotations

import pytest
from config_testlib import compose_config
from omegaconf import OmegaConf

from hybridrl.trainer.ppo.roles import Role, need_critic, need_reference_policy, need_reward_model


def test_role_strings_are_the_worker_group_prefixes():
    assert [str(r) for r in Role] == ["actor", "rollout", "actor_rollout", "critic", "ref", "rm", "actor_rollout_ref"]
    assert Role.from_string("actor_rollout_ref") is Role.ActorRolloutRef
    with pytest.raises(ValueError, match="unknown role"):
        Role.from_string("policy")


def _cfg(**over):
    """The shipped ppo_trainer tree (gae, no KL, no reward model) with dotted ``over`` values set."""
    cfg = compose_config()
    for key, value in over.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def test_need_critic_follows_critic_enable_then_estimator():
    assert need_critic(_cfg()) is True  # gae
    with pytest.warns(UserWarning, match="critic.enable"):
        assert need_critic(_cfg(**{"algorithm.adv_estimator": "grpo"})) is False
    assert need_critic(_cfg(**{"algorithm.adv_estimator": "grpo", "critic.enable": True})) is True
    assert need_critic(_cfg(**{"critic.enable": False})) is False


def test_the_disabled_critic_warning_shows_once_per_process_under_the_default_filter():
    import warnings

    from hybridrl.config import access

    grpo = _cfg(**{"algorithm.adv_estimator": "grpo"})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # Python's own: once per warning location
        access.__dict__.pop("__warningregistry__", None)
        need_critic(grpo)
        need_critic(grpo)  # another caller line, as the driver, task runner and trainer each call it
    assert [str(w.message).split(".")[0] for w in seen] == ["Disabled critic as algorithm"]


def test_need_reference_policy_and_reward_model():
    assert need_reference_policy(_cfg()) is False
    assert need_reference_policy(_cfg(**{"algorithm.use_kl_in_reward": True})) is True
    assert need_reference_policy(_cfg(**{"actor_rollout_ref.actor.use_kl_loss": True})) is True
    assert need_reward_model(_cfg()) is False and need_reward_model(_cfg(**{"reward_model.enable": True})) is True
    assert need_reward_model({Role.ActorRollout: object(), Role.RewardModel: object()}) is True  # verl's signature


def _mapping(**over):
    """main_ppo's (role → worker class, pool spec, role → pool) for a config with ``over`` applied."""
    from hybridrl.trainer.ppo.task_runner import build_role_mapping

    cfg = _cfg(**{"trainer.n_gpus_per_node": 2, "trainer.nnodes": 1, **over})
    workers, spec, mapping = build_role_mapping(cfg)
    assert set(workers) == set(mapping)
    return spec, mapping


def test_main_ppo_roles_and_pools_follow_the_config():
    spec, mapping = _mapping()  # PPO: actor+rollout and critic colocated on the global pool
    assert spec == {"global_pool": [2]}
    assert mapping == {Role.ActorRollout: "global_pool", Role.Critic: "global_pool"}
    with pytest.warns(UserWarning, match="critic.enable"):  # GRPO + KL loss: no critic, a reference policy
        _, mapping = _mapping(**{"algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.use_kl_loss": True})
    assert set(mapping) == {Role.ActorRollout, Role.RefPolicy}
    _, mapping = _mapping(**{"algorithm.use_kl_in_reward": True})
    assert mapping[Role.RefPolicy] == "global_pool"
    spec, mapping = _mapping(**{"reward_model.enable": True})  # verl 0.5: the RM shares the global pool
    assert spec == {"global_pool": [2]} and mapping[Role.RewardModel] == "global_pool"
    spec, mapping = _mapping(**{"reward_model.enable": True, "reward_model.enable_resource_pool": True,
                                "reward_model.n_gpus_per_node": 1, "reward_model.nnodes": 1})
    assert spec == {"global_pool": [2], "reward_pool": [1]} and mapping[Role.RewardModel] == "reward_pool"
    spec, mapping = _mapping(**{"critic.enable_resource_pool": True,  # split placement: the critic on its own pool
                                "critic.n_gpus_per_node": 3, "critic.nnodes": 1})
    assert spec == {"global_pool": [2], "critic_pool": [3]}
    assert mapping == {Role.ActorRollout: "global_pool", Role.Critic: "critic_pool"}
