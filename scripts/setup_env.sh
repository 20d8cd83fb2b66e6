#!/usr/bin/env bash
# Create (or reuse) the local virtual environment .venv with hybridrl and its test tools.
# torch is pinned to 2.13.0 in the same pip command: an unpinned torch pulls a multi-GB CUDA build
# on a CPU machine. Re-running is cheap: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HYBRIDRL_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="${HYBRIDRL_TORCH_PIN:-torch==2.13.0}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.hybridrl-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $TORCH_PIN"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing hybridrl + test extras into $VENV (pinning $TORCH_PIN)"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "$TORCH_PIN" -e ".[test,dev]"
  echo "$want" > "$stamp"
else
  echo "[setup] $VENV is up to date"
fi
