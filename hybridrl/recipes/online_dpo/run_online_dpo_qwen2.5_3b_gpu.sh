#!/usr/bin/env bash
# Online DPO in the style of verl's recipe/spin/run_spin.sh, on Qwen2.5-3B-Instruct and GSM8K, 1 node x 8 GPUs,
# vLLM rollout (hybridrl/recipes/common_gpu.sh): 2 responses per prompt ranked by the GSM8K rule reward, sigmoid DPO
# (beta 0.1) against a frozen reference. Extra key=value arguments win.
set -xeuo pipefail
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
source "$(dirname "$0")/../common_gpu.sh"

python3 -m hybridrl.recipes.online_dpo.main_online_dpo \
  "${GPU_ARGS[@]}" \
  data.train_batch_size=256 \
  actor_rollout_ref.actor.ppo_mini_batch_size=64 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.actor.optim.lr=5e-7 \
  actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.rollout.temperature=1.0 \
  algorithm.dpo.beta=0.1 \
  algorithm.dpo.loss_type=sigmoid \
  trainer.ref_update_freq=-1 \
  trainer.project_name=hybridrl-online-dpo \
  trainer.experiment_name=qwen2.5_3b_gsm8k_online_dpo \
  "$@"
