"""TaskRunner: the Ray actor that hosts the single controller (``hybridrl.trainer.main_ppo.run_ppo`` starts it).

Roles and pools follow verl 0.5's ``main_ppo``: every role maps to ``global_pool``
(``[trainer.n_gpus_per_node] * trainer.nnodes`` devices; on CPU, worker processes). Split placement is
selected in the config, no code: ``reward_model.enable_resource_pool`` puts the reward model on its own
``reward_pool`` (later verl's keys) and ``critic.enable_resource_pool`` the critic on ``critic_pool``, each
sized ``[<section>.n_gpus_per_node] * <section>.nnodes``; ``trainer.v1.trainer_mode=separate_async`` puts the
rollout (role "rollout") on ``rollout_pool`` (``actor_rollout_ref.rollout.nnodes / n_gpus_per_node``, verl 0.9)
and the actor (role "actor") on ``global_pool``. ``distillation.enabled`` adds ``distillation_pool``
(``[distillation.n_gpus_per_node] * distillation.nnodes``) for the teachers (``hybridrl.trainer.distillation``).
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Environment for every Ray worker (verl's PPO_RAY_RUNTIME_ENV, minus GPU-vendor knobs that do not apply).
PPO_RAY_ENV_VARS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "NCCL_CUMEM_ENABLE": "0",
    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"),
}


def build_role_mapping(config: DictConfig) -> tuple[dict, dict, dict]:
    """Return ``(role_worker_mapping, resource_pool_spec, mapping)`` as verl 0.5's main_ppo builds them.

    Worker classes follow each role's strategy (:mod:`hybridrl.config.worker_classes`): the policy and its
    reference ``actor_rollout_ref.actor.strategy``, the critic ``critic.strategy``, the reward model
    ``reward_model.strategy``. With Megatron the reference lives in the policy worker (``Role.ActorRolloutRef``).
    """
    import ray

    from hybridrl.config.worker_classes import REFERENCE_IN_POLICY_WORKER, import_worker_class
    from hybridrl.trainer.ppo.roles import Role, need_critic, need_reference_policy

    actor_strategy = config.actor_rollout_ref.actor.strategy
    global_pool = "global_pool"
    resource_pool_spec = {global_pool: [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    # rollout.mode=async: the policy worker also serves generation requests (verl's AsyncActorRolloutRefWorker)
    def policy_worker(kind: str) -> Any:
        return ray.remote(import_worker_class(actor_strategy, kind, "actor_rollout_ref.actor.strategy"))

    policy_cls = policy_worker("async_policy" if config.actor_rollout_ref.rollout.mode == "async" else "policy")
    ref_in_policy = need_reference_policy(config) and actor_strategy in REFERENCE_IN_POLICY_WORKER
    policy_role = Role.ActorRolloutRef if ref_in_policy else Role.ActorRollout
    role_worker_mapping: dict[Any, Any] = {policy_role: policy_cls}
    mapping: dict[Any, str] = {policy_role: global_pool}
    if config.trainer.v1.trainer_mode == "separate_async":  # the rollout on a pool of its own (verl 0.9)
        _split_rollout(config, role_worker_mapping, mapping, resource_pool_spec)
    if need_critic(config):
        role_worker_mapping[Role.Critic] = ray.remote(
            import_worker_class(config.critic.strategy, "critic", "critic.strategy"))
        mapping[Role.Critic] = _own_pool(config.critic, "critic_pool", resource_pool_spec) or global_pool
    if need_reference_policy(config) and not ref_in_policy:
        role_worker_mapping[Role.RefPolicy] = policy_worker("policy")
        mapping[Role.RefPolicy] = global_pool
    if config.reward_model.enable:
        role_worker_mapping[Role.RewardModel] = ray.remote(
            import_worker_class(config.reward_model.strategy, "reward_model", "reward_model.strategy"))
        mapping[Role.RewardModel] = _own_pool(config.reward_model, "reward_pool", resource_pool_spec) or global_pool
    if config.distillation.enabled:  # the teachers' pool (trainer/distillation/teachers.py spawns them on it)
        distillation = config.distillation
        resource_pool_spec["distillation_pool"] = [int(distillation.n_gpus_per_node)] * int(distillation.nnodes)
    return role_worker_mapping, resource_pool_spec, mapping


def _split_rollout(config: DictConfig, role_worker_mapping: dict, mapping: dict, resource_pool_spec: dict) -> None:
    """separate_async: the actor (role "actor") keeps ``global_pool``; rollout workers (role "rollout") get
    ``rollout_pool``: ``[rollout.n_gpus_per_node] * rollout.nnodes``."""
    from hybridrl.trainer.ppo.roles import Role

    rollout = config.actor_rollout_ref.rollout
    policy_cls = role_worker_mapping.pop(Role.ActorRollout)
    del mapping[Role.ActorRollout]
    role_worker_mapping[Role.Actor] = role_worker_mapping[Role.Rollout] = policy_cls
    mapping[Role.Actor] = "global_pool"
    mapping[Role.Rollout] = "rollout_pool"
    resource_pool_spec["rollout_pool"] = [int(rollout.n_gpus_per_node)] * int(rollout.nnodes)


def _own_pool(section: DictConfig, name: str, resource_pool_spec: dict) -> str | None:
    """Add pool ``name`` (``[section.n_gpus_per_node] * section.nnodes``) when ``section.enable_resource_pool``."""
    if not section.enable_resource_pool:
        return None
    resource_pool_spec[name] = [int(section.n_gpus_per_node)] * int(section.nnodes)
    return name


def load_tokenizer_and_processor(model_config: DictConfig) -> tuple[Any, Any]:
    """The tokenizer of ``actor_rollout_ref.model.path`` and its multimodal processor (None for a text model)."""
    from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer

    local_path = os.path.expanduser(model_config.path)
    trust_remote_code = model_config.trust_remote_code
    return hf_tokenizer(local_path, trust_remote_code=trust_remote_code), hf_processor(
        local_path, trust_remote_code=trust_remote_code
    )


class TaskRunner:
    """Runs on a Ray actor: builds tokenizer, datasets, reward functions, worker groups, then trains."""

    def trainer_class(self) -> type:
        """The trainer this runner builds; recipes return a RayPPOTrainer subclass (e.g. RayDAPOTrainer)."""
        from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer

        return RayPPOTrainer

    def run(self, config: DictConfig) -> dict[str, float]:
        from hybridrl.trainer.ppo.reward import load_reward_manager, uses_reward_loop
        from hybridrl.trainer.ppo.roles import ResourcePoolManager
        from hybridrl.utils.dataset.rl_dataset import collate_fn, create_rl_dataset, create_rl_sampler

        OmegaConf.resolve(config)
        tokenizer, processor = load_tokenizer_and_processor(config.actor_rollout_ref.model)
        role_worker_mapping, pool_spec, mapping = build_role_mapping(config)
        reward_kwargs = dict(config.reward_model.get("reward_kwargs", {}) or {})
        reward_fn = load_reward_manager(config, tokenizer, num_examine=0, **reward_kwargs)
        # the reward loop's workers serve validation too (they print no samples)
        reward_loop = uses_reward_loop(config)
        val_reward_fn = reward_fn if reward_loop else load_reward_manager(config, tokenizer, 1, **reward_kwargs)
        train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor)
        val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, processor)
        trainer = self.trainer_class()(
            config=config, tokenizer=tokenizer, processor=processor, role_worker_mapping=role_worker_mapping,
            resource_pool_manager=ResourcePoolManager(resource_pool_spec=pool_spec, mapping=mapping),
            reward_fn=reward_fn, val_reward_fn=val_reward_fn, train_dataset=train_dataset, val_dataset=val_dataset,
            collate_fn=collate_fn, train_sampler=create_rl_sampler(config.data, train_dataset),
            device_name=config.trainer.device,
        )
        trainer.init_workers()
        return trainer.fit()

