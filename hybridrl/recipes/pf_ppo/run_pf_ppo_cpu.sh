#!/usr/bin/env bash
# PF-PPO on CPU: PPO with a critic (GAE), batch resampled by |score|^2 after the advantages.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=pf_ppo_trainer \
  "${CPU_ARGS[@]}" \
  critic.model.path="$MODEL_PATH" \
  critic.model.enable_gradient_checkpointing=False \
  critic.ppo_micro_batch_size_per_gpu=8 \
  critic.optim.lr=1e-3 \
  trainer.experiment_name=pf_ppo-tiny-cpu \
  "$@"
