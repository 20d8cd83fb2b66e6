#!/usr/bin/env bash
# Create .venv-megatron: a separate environment with megatron-core, mbridge and hybridrl (strategy=megatron).
#
# Why a separate venv: mbridge (HF <-> Megatron weights, verl's use_mbridge=True path) breaks on transformers 5.x
# (`LlamaConfig has no attribute rope_theta`), while the main stack needs transformers>=5.16. On Python 3.11
# megatron-core resolves to 0.16.x (0.17+ declare Python >= 3.12). megatron-core's own deps are torch, numpy and
# packaging only (no CUDA torch, no TransformerEngine); mbridge is installed with --no-deps (its deps are pinned
# here). torch is pinned in every pip command: an unpinned resolve pulls a multi-GB CUDA torch.
#
# Usage: bash scripts/setup_megatron_env.sh [VENV_DIR]   (default: .venv-megatron at the repo root)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-megatron}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
TORCH_PIN="torch==2.13.0"
PIN_FILE="$(mktemp)"
printf '%s\n' "$TORCH_PIN" "transformers==4.57.6" > "$PIN_FILE"
trap 'rm -f "$PIN_FILE"' EXIT

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import megatron.core, mbridge, hybridrl" 2>/dev/null; then
  echo "[setup_megatron_env] $VENV is ready"; exit 0
fi
"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip
# One resolve for every pinned dependency (megatron-core's, transformers', hybridrl's runtime ones), then the two
# --no-deps installs: mbridge and hybridrl itself (editable), without moving torch or transformers. --no-compile:
# the tests import a small part of these packages, which Python compiles on first import and caches; but where
# PYTHONDONTWRITEBYTECODE is set (CI machines) nothing would ever be cached and every process would compile torch & co.
# again, so there the install compiles up front.
compile_flag=(--no-compile)
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then compile_flag=(); fi
"$PIP" install -q "${compile_flag[@]}" -c "$PIN_FILE" "$TORCH_PIN" "megatron-core>=0.16,<0.17" "transformers==4.57.6" \
  safetensors einops "ray[default]>=2.40" "hydra-core>=1.3" "omegaconf>=2.3" pyarrow pandas "tensordict>=0.10" \
  torchdata tqdm tokenizers psutil pytest pytest-timeout
"$PIP" install -q "${compile_flag[@]}" --no-deps "mbridge==0.15.1" -e "$ROOT"
"$VENV/bin/python" -c "import torch, megatron.core, mbridge, transformers; print('megatron-core', megatron.core.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
