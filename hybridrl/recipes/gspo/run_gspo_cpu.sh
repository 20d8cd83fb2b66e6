#!/usr/bin/env bash
# GSPO on CPU: sequence-level importance ratio and clipping (0.0003/0.0004) on GRPO advantages.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=gspo_trainer \
  "${CPU_ARGS[@]}" \
  trainer.experiment_name=gspo-tiny-cpu \
  "$@"
