#!/usr/bin/env bash
# SPIN on CPU with the tiny model (hybridrl/recipes/common_cpu.sh): the chosen response is the SFT target (here the
# arithmetic answer, copied into extra_info.response by add_sft_response.py), the rejected one the model's own
# sample; every 4 steps the opponent (reference) becomes the current model (a SPIN iteration). Extra args win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"
SPIN_DATA_DIR=${SPIN_DATA_DIR:-$WORK_DIR/arithmetic_spin}
if [ ! -f "$SPIN_DATA_DIR/train.parquet" ]; then
  python "$RECIPES_DIR/spin/add_sft_response.py" --input "$DATA_DIR" --output "$SPIN_DATA_DIR" \
    --source reward_model.ground_truth
fi

python -m hybridrl.recipes.spin.main_spin \
  "${CPU_ARGS[@]}" \
  data.train_files="$SPIN_DATA_DIR/train.parquet" \
  data.val_files="$SPIN_DATA_DIR/test.parquet" \
  data.response_key=response \
  custom_reward_function.path=null \
  actor_rollout_ref.rollout.n=2 \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 \
  actor_rollout_ref.actor.optim.lr=1e-3 \
  algorithm.dpo.beta=0.1 \
  trainer.ref_update_freq=4 \
  trainer.experiment_name=spin-tiny-cpu \
  "$@"
