#!/usr/bin/env bash
# Dr. GRPO on CPU: GRPO advantages without std normalisation, seq-mean-token-sum-norm loss, no KL.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=drgrpo_trainer \
  "${CPU_ARGS[@]}" \
  trainer.experiment_name=drgrpo-tiny-cpu \
  "$@"
