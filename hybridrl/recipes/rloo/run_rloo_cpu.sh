#!/usr/bin/env bash
# RLOO on CPU: leave-one-out baseline over rollout.n=4 responses, KL in the reward.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=rloo_trainer \
  "${CPU_ARGS[@]}" \
  trainer.experiment_name=rloo-tiny-cpu \
  "$@"
