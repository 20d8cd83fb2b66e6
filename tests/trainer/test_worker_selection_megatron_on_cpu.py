"""main_ppo's worker classes follow each role's strategy (verl 0.5), and ``--config-name ppo_megatron_trainer``
command lines are checked against that file (no Ray cluster needed)."""

from __future__ import annotations

import warnings

import pytest

from hybridrl.config import ConfigError, prepare_cli_argv
from hybridrl.config.worker_classes import WORKER_CLASSES, import_worker_class
from hybridrl.trainer.ppo.roles import Role
from hybridrl.trainer.ppo.task_runner import build_role_mapping
from tests.config_testlib import compose_config


def _classes(config_name: str, *overrides: str) -> dict[Role, str]:
    """role → worker class name of main_ppo's role mapping (of the tree main_ppo completes)."""
    from hybridrl.trainer.main_ppo import complete_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # critic.enable derived from the estimator
        # sync mode: the batch-generate workers (verl 0.9's ppo_trainer defaults to async, its server-mode workers)
        config = compose_config(config_name, ["actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.mode=sync",
                                              *overrides])
        workers, _, mapping = build_role_mapping(complete_config(config))
    assert set(workers) == set(mapping) and set(mapping.values()) == {"global_pool"}
    return {role: worker.__ray_metadata__.class_name for role, worker in workers.items()}


def test_fsdp_strategies_select_the_fsdp_workers():
    for strategy in ("fsdp", "fsdp2"):
        classes = _classes("ppo_trainer", f"actor_rollout_ref.actor.strategy={strategy}", f"critic.strategy={strategy}",
                           "algorithm.use_kl_in_reward=True", "reward_model.enable=True")
        assert classes == {Role.ActorRollout: "ActorRolloutRefWorker", Role.Critic: "CriticWorker",
                           Role.RefPolicy: "ActorRolloutRefWorker", Role.RewardModel: "RewardModelWorker"}


def test_megatron_selects_the_megatron_policy_worker_with_the_reference_inside():
    grpo = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True")
    assert _classes("ppo_megatron_trainer", *grpo) == {Role.ActorRolloutRef: "MegatronActorRolloutRefWorker"}
    # no KL term: no reference, the plain actor+rollout role
    assert _classes("ppo_megatron_trainer", "algorithm.adv_estimator=grpo") == {
        Role.ActorRollout: "MegatronActorRolloutRefWorker"}


def test_a_strategy_without_the_worker_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match=r"critic.strategy='deepspeed' is not a training strategy: use one of fsdp"):
        import_worker_class("deepspeed", "critic", "critic.strategy")
    with pytest.raises(ValueError, match=r"actor_rollout_ref.actor.strategy='megatron' has no async policy worker yet"):
        import_worker_class("megatron", "async_policy", "actor_rollout_ref.actor.strategy")
    missing = {**WORKER_CLASSES["megatron"], "critic": "hybridrl.workers.megatron.no_such_module:Critic"}
    monkeypatch.setitem(WORKER_CLASSES, "megatron", missing)
    with pytest.raises(ValueError, match=r"critic.strategy='megatron': this version of hybridrl has no critic worker"):
        import_worker_class("megatron", "critic", "critic.strategy")


def test_megatron_command_line_is_checked_against_its_own_file():
    argv = ["--config-name", "ppo_megatron_trainer", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.model.enable_gradient_checkpointing=False", "trainer.v1.trainer_mode=sync"]
    # keys of ppo_trainer.yaml the Megatron file lacks are added (the trainer fills the rest with their defaults)
    assert prepare_cli_argv(argv) == [*argv[:3], "+actor_rollout_ref.model.enable_gradient_checkpointing=False",
                                      "+trainer.v1.trainer_mode=sync"]
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.megatron.tensor_model_paralel_size"):
        prepare_cli_argv(["--config-name", "ppo_megatron_trainer",
                          "actor_rollout_ref.actor.megatron.tensor_model_paralel_size=2"])
    recipe = ["--config-name", "dapo_trainer", "no.such.key=1"]  # a recipe's own YAML: left to Hydra
    assert prepare_cli_argv(recipe) == recipe


def test_main_ppo_completes_the_megatron_tree():
    from hybridrl.trainer.main_ppo import complete_config

    config = complete_config(compose_config("ppo_megatron_trainer", ["actor_rollout_ref.rollout.name=hf"]))
    assert config.trainer.v1.trainer_mode == "sync"  # ppo_trainer's defaults, resolved
    assert config.data.gen_batch_size == config.data.train_batch_size == 1024
    assert config.actor_rollout_ref.actor.strategy == "megatron"
    assert config.actor_rollout_ref.ref.megatron.override_transformer_config.recompute_modules == ["core_attn"]
