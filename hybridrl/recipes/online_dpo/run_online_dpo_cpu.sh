#!/usr/bin/env bash
# Online DPO on CPU with the tiny model (hybridrl/recipes/common_cpu.sh): 8 prompts x 8 sampled responses per step, the
# best vs the worst response of each prompt (by the digit-share reward) form its pair, sigmoid DPO with beta 0.1
# against the initial model. Extra key=value arguments win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"

python -m hybridrl.recipes.online_dpo.main_online_dpo \
  "${CPU_ARGS[@]}" \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.actor.ppo_epochs=2 \
  actor_rollout_ref.actor.optim.lr=2e-3 \
  algorithm.dpo.beta=0.1 \
  algorithm.dpo.loss_type=sigmoid \
  algorithm.dpo.label_smoothing=0.0 \
  trainer.experiment_name=online-dpo-tiny-cpu \
  "$@"
