#!/usr/bin/env bash
# Create (or reuse) the local virtual environment .venv with hybridrl and its test tools.
# torch is pinned to 2.13.0 in the same pip command: an unpinned torch pulls a multi-GB CUDA build
# on a CPU machine. Re-running is cheap: the install is skipped while pyproject.toml is unchanged.
# HYBRIDRL_INSTALLER=uv (scripts/quickstart.sh sets it) installs through uv instead of pip: uv is pip-installed into
# the venv, then installs the same set, compiling bytecode up front only when PYTHONDONTWRITEBYTECODE is set
# (then Python never writes it, and an uncompiled venv recompiles torch & co. in every new process; otherwise
# the first import of each module writes its .pyc, which is cheaper than compiling everything); pip's find-links
# and index settings (PIP_FIND_LINKS or pip config's global.find-links, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL) are
# handed to uv; uv not installable falls back to pip. The default stays pip (the path the full CI run has passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HYBRIDRL_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="${HYBRIDRL_TORCH_PIN:-torch==2.13.0}"
INSTALLER="${HYBRIDRL_INSTALLER:-pip}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.hybridrl-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $TORCH_PIN"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing hybridrl + test extras into $VENV (pinning $TORCH_PIN)"
  if [ "$INSTALLER" = uv ] && "$VENV/bin/pip" install -q uv; then
    uv_args=()
    links="${PIP_FIND_LINKS:-$("$VENV/bin/pip" config get global.find-links 2>/dev/null || true)}"
    for link in $links; do uv_args+=(--find-links "$link"); done
    [ -n "${PIP_INDEX_URL:-}" ] && uv_args+=(--index-url "$PIP_INDEX_URL")
    for url in ${PIP_EXTRA_INDEX_URL:-}; do uv_args+=(--extra-index-url "$url"); done
    [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && uv_args+=(--compile-bytecode)
    "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" "${uv_args[@]}" \
      "$TORCH_PIN" -e ".[test,dev]"
  else
    [ "$INSTALLER" = uv ] && echo "[setup] uv could not be installed; installing with pip"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "$TORCH_PIN" -e ".[test,dev]"
  fi
  echo "$want" > "$stamp"
else
  echo "[setup] $VENV is up to date"
fi
