#!/usr/bin/env bash
# hybridrl's GPU kit: one PASS|FAIL|SKIP line per check, then a JSON of figures ($OUT/gpu_check.json or ./).
#
#   bash scripts/gpu_check.sh                      # on a CUDA machine (≤ 8 min: --budget-s 480)
#   bash scripts/gpu_check.sh --wheels .whl        # install missing pure-Python deps from a carried wheel folder
#   bash scripts/gpu_check.sh --dry-run            # CPU-side parts here: gloo, tiny sizes (the test suite runs it)
#
# The checks and their options: scripts/gpu_check/__init__.py, docs/performance.md ("GPU kit").
# PYTHON picks the interpreter (default: python3, the one holding PyTorch on the GPU machine).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$ROOT:$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "$PYTHON" -m gpu_check "$@"
