#!/usr/bin/env bash
# DAPO, verl's recipe/dapo settings scaled to Qwen2.5-7B on GSM8K, 1 node x 8 GPUs, vLLM rollout
# (hybridrl/recipes/common_gpu.sh): gen batch 3x train batch, clip-higher 0.2/0.28, token-mean loss, no KL,
# overlong shaping over the last 256 of 1024 response tokens. Extra key=value arguments win.
set -xeuo pipefail
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
source "$(dirname "$0")/../common_gpu.sh"

python3 -m hybridrl.recipes.dapo.main_dapo \
  "${GPU_ARGS[@]}" \
  data.train_batch_size=512 \
  data.gen_batch_size=1536 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.rollout.n=16 \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.clip_ratio_c=10.0 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.actor.use_kl_loss=False \
  algorithm.use_kl_in_reward=False \
  algorithm.filter_groups.enable=True \
  algorithm.filter_groups.metric=acc \
  algorithm.filter_groups.max_num_gen_batches=10 \
  reward_model.reward_manager=dapo \
  reward_model.overlong_buffer.enable=True \
  reward_model.overlong_buffer.len=256 \
  reward_model.overlong_buffer.penalty_factor=1.0 \
  trainer.experiment_name=qwen2.5_7b_gsm8k_dapo \
  "$@"
