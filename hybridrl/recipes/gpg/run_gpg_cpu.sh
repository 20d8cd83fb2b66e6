#!/usr/bin/env bash
# GPG on CPU: plain policy gradient -A·log π with GPG's group advantages, no clipping, no KL.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=gpg_trainer \
  "${CPU_ARGS[@]}" \
  trainer.experiment_name=gpg-tiny-cpu \
  "$@"
