#!/usr/bin/env bash
# REINFORCE++ on CPU: discounted returns whitened over the batch, k2 KL loss.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=reinforce_pp_trainer \
  "${CPU_ARGS[@]}" \
  trainer.experiment_name=reinforce_pp-tiny-cpu \
  "$@"
