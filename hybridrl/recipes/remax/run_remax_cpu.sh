#!/usr/bin/env bash
# ReMax on CPU: greedy-response baseline (one extra greedy generation per prompt), KL in the reward.
# Tiny model, 2 CPU workers, hf rollout (hybridrl/recipes/common_cpu.sh); extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=remax_trainer \
  "${CPU_ARGS[@]}" \
  trainer.experiment_name=remax-tiny-cpu \
  "$@"
