#!/usr/bin/env bash
# SPIN in the style of verl's recipe/spin/run_spin.sh on Qwen2.5-7B-Instruct and GSM8K, 1 node x 8 GPUs, vLLM
# rollout (hybridrl/recipes/common_gpu.sh). The chosen response is GSM8K's worked solution (extra_info.answer, written by
# examples/data_preprocess/gsm8k.py), the rejected one the model's own; the opponent (reference) is refreshed
# every ref_update_freq steps (verl's run_spin.sh uses 1). Extra key=value arguments win.
set -xeuo pipefail
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
source "$(dirname "$0")/../common_gpu.sh"

python3 -m hybridrl.recipes.spin.main_spin \
  "${GPU_ARGS[@]}" \
  data.train_batch_size=32 \
  data.max_prompt_length=1024 \
  data.max_response_length=1024 \
  data.response_key=answer \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.rollout.n=1 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.ref.fsdp_config.param_offload=False \
  algorithm.dpo.beta=0.1 \
  trainer.ref_update_freq=1 \
  trainer.test_freq=1 \
  trainer.total_epochs=1000 \
  trainer.project_name=hybridrl-spin \
  trainer.experiment_name=qwen2.5_7b_gsm8k_spin \
  "$@"
