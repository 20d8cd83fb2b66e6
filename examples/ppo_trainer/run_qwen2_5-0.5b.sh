#!/usr/bin/env bash
# PPO (GAE with a critic) on GSM8K with Qwen2.5-0.5B-Instruct: one node, 8 GPUs, FSDP2 actor/critic/ref,
# vLLM rollout. The keys and values follow verl's documented PPO quickstart (docs/start/quickstart.rst)
# with the node widened to 8 GPUs, so a verl user recognises every line. Needs the `vllm` extra and:
#   python examples/data_preprocess/gsm8k.py --local_dataset_path ~/gsm8k --local_save_dir ~/data/gsm8k
# MODEL may be a local folder or a Hugging Face id. Extra arguments are appended as Hydra overrides.
set -xeuo pipefail
DATA="${DATA:-$HOME/data/gsm8k}"
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"

PYTHONUNBUFFERED=1 python3 -m hybridrl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=512 \
    data.max_response_length=256 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=sync \
    actor_rollout_ref.rollout.calculate_log_probs=False \
    actor_rollout_ref.model.use_remove_padding=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    critic.strategy=fsdp2 \
    critic.optim.lr=1e-5 \
    critic.model.path="$MODEL" \
    critic.ppo_micro_batch_size_per_gpu=4 \
    algorithm.kl_ctrl.kl_coef=0.001 \
    trainer.logger='[console,tensorboard]' \
    trainer.val_before_train=False \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=10 \
    trainer.test_freq=10 \
    trainer.total_epochs=15 \
    "$@" 2>&1 | tee hybridrl_demo.log
