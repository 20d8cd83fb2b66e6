#!/usr/bin/env bash
# Build the wheel folder the GPU kit carries to a machine without internet (Python 3.12, x86-64 Linux; it has torch
# and transformers but not these). Pure-Python wheels only, pinned to the versions hybridrl's .venv runs:
#
#   bash scripts/gpu_check/build_wheels.sh [DIR]        # default DIR: .whl (add /.whl/ to .git/info/exclude)
#   bash scripts/gpu_check.sh --wheels .whl             # there: installs the missing ones into a folder of its own
#
# antlr4-python3-runtime 4.9.3 (omegaconf's parser) is published as a source archive only: it is built into a wheel
# here. The folder must stay under 60 MiB (the device tool carries at most 64 MiB with the working tree).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DIR="${1:-$ROOT/.whl}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
LIMIT_MIB=60
# name==version; keep in step with scripts/gpu_check/environment.py CARRIED_DISTRIBUTIONS
WHEELS=(hydra-core==1.3.8 omegaconf==2.3.1 tensordict==0.15.3 pyvers==0.2.3 torchdata==0.11.0)
SOURCE_ONLY=(antlr4-python3-runtime==4.9.3)

mkdir -p "$DIR"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d "$DIR" "${WHEELS[@]}"
"$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation -w "$DIR" "${SOURCE_ONLY[@]}"
rm -f "$DIR"/*.tar.gz
size_bytes=$(du -cb "$DIR"/*.whl | tail -1 | cut -f1)
ls -l "$DIR"/*.whl
echo "[build_wheels] $(ls "$DIR"/*.whl | wc -l) wheels, $((size_bytes / 1024)) KiB in $DIR"
if [ "$size_bytes" -ge $((LIMIT_MIB * 1024 * 1024)) ]; then
  echo "[build_wheels] ERROR: $size_bytes bytes is over ${LIMIT_MIB} MiB" >&2
  exit 1
fi
