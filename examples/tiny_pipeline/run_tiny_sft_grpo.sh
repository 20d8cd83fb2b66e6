#!/usr/bin/env bash
# The tiny HybridFlow path on CPU: random tiny model -> SFT warm start (torchrun, 2 ranks) -> GRPO (main_ppo).
# Prints the validation accuracy before and after GRPO; see tiny_pipeline.py for the stages and knobs.
#   bash examples/tiny_pipeline/run_tiny_sft_grpo.sh [--work_dir DIR] [--seed N] [--grpo_steps N] ...
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python examples/tiny_pipeline/tiny_pipeline.py "$@"
