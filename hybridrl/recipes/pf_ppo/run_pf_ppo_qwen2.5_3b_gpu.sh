#!/usr/bin/env bash
# PF-PPO: PPO with a critic (GAE), batch resampled by |score|^2 (verl's use_pf_ppo).
# Qwen2.5-3B-Instruct on GSM8K, 1 node x 8 GPUs, vLLM rollout (hybridrl/recipes/common_gpu.sh); extra key=value arguments win.
set -xeuo pipefail
source "$(dirname "$0")/../common_gpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python3 -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=pf_ppo_trainer \
  "${GPU_ARGS[@]}" \
  actor_rollout_ref.rollout.n=1 \
  critic.model.path="$MODEL_PATH" \
  critic.model.use_remove_padding=True \
  critic.model.enable_gradient_checkpointing=True \
  critic.optim.lr=1e-5 \
  critic.ppo_micro_batch_size_per_gpu=32 \
  trainer.experiment_name=qwen2.5_3b_gsm8k_pf_ppo \
  "$@"
