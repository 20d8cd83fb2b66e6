#!/usr/bin/env bash
# DAPO on CPU with the tiny model: dynamic sampling (3 generation batches' worth of prompts at most per step),
# clip-higher, token-mean loss, overlong shaping over the last 2 of 8 response tokens. Extra key=value args win.
set -euo pipefail
source "$(dirname "$0")/../common_cpu.sh"

python -m hybridrl.recipes.dapo.main_dapo \
  "${CPU_ARGS[@]}" \
  data.gen_batch_size=16 \
  algorithm.filter_groups.enable=True \
  algorithm.filter_groups.metric=acc \
  algorithm.filter_groups.max_num_gen_batches=6 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  reward_model.reward_manager=dapo \
  reward_model.overlong_buffer.enable=True \
  reward_model.overlong_buffer.len=2 \
  reward_model.overlong_buffer.penalty_factor=0.5 \
  trainer.experiment_name=dapo-tiny-cpu \
  "$@"
