#!/usr/bin/env bash
# GPG (arXiv 2504.02546): -A·log π with GPG's scaled group advantages, no KL.
# Qwen2.5-3B-Instruct on GSM8K, 1 node x 8 GPUs, vLLM rollout (hybridrl/recipes/common_gpu.sh); extra key=value arguments win.
set -xeuo pipefail
source "$(dirname "$0")/../common_gpu.sh"
CONFIG_DIR=$(cd "$(dirname "$0")/config" && pwd)

python3 -m hybridrl.trainer.main_ppo --config-path="$CONFIG_DIR" --config-name=gpg_trainer \
  "${GPU_ARGS[@]}" \
  trainer.experiment_name=qwen2.5_3b_gsm8k_gpg \
  "$@"
