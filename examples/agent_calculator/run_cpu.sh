#!/usr/bin/env bash
# GRPO of the calculator agent on CPU (2 hf rollout workers, server mode, multi-turn with the calculator tool).
#   bash examples/agent_calculator/warm_start.sh outputs/agent_calculator     # once: data + warm model
#   bash examples/agent_calculator/run_cpu.sh outputs/agent_calculator [extra key=value overrides]
# Env:
#   SEED (0)       data.seed (shuffling) and rollout.seed (sampling)
#   STEPS (30)     GRPO steps; validation (128 held-out questions, 1 sample each at T=1) every TEST_FREQ (5)
#   TOOLS (1)      0 = the no-tool baseline: same model and data, plain single-turn generation (rollout.mode=sync,
#                  no tools: a tool call the model writes is never answered)
#   VAL_ONLY (0)   1 = validate the model once and stop (the warm model's rates before RL)
#   MODEL          model folder (default <work_dir>/warm_model, written by warm_start.sh)
#   NAME           experiment name (default grpo_seed<SEED>, or no_tool_seed<SEED>)
# TensorBoard events go to <work_dir>/tensorboard/<NAME>; plot them with plot.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=examples/agent_calculator
work_dir=$(realpath -m "${1:-outputs/agent_calculator}")
shift || true
SEED=${SEED:-0}
STEPS=${STEPS:-30}
TEST_FREQ=${TEST_FREQ:-5}
TOOLS=${TOOLS:-1}
VAL_ONLY=${VAL_ONLY:-False}
[ "$VAL_ONLY" = 1 ] && VAL_ONLY=True
MODEL=${MODEL:-$work_dir/warm_model}
if [ "$TOOLS" = 1 ]; then
    NAME=${NAME:-grpo_seed$SEED}
    rollout_args=(
        actor_rollout_ref.rollout.mode=async
        actor_rollout_ref.rollout.multi_turn.enable=True
        actor_rollout_ref.rollout.multi_turn.tool_config_path="$here/tool_config.yaml"
        actor_rollout_ref.rollout.multi_turn.format=hermes
        actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3
        actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1
        actor_rollout_ref.rollout.agent.num_workers=2
    )
else
    NAME=${NAME:-no_tool_seed$SEED}
    rollout_args=(actor_rollout_ref.rollout.mode=sync actor_rollout_ref.rollout.multi_turn.enable=False)
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
    RAY_DEDUP_LOGS=0 TENSORBOARD_DIR="$work_dir/tensorboard/$NAME"

python -m hybridrl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$work_dir/data/train.parquet" \
    data.val_files="$work_dir/data/test.parquet" \
    data.train_batch_size=16 \
    data.max_prompt_length=80 \
    data.max_response_length=96 \
    data.truncation=error \
    data.return_raw_chat=True \
    data.dataloader_num_workers=0 \
    data.seed="$SEED" \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.enable_gradient_checkpointing=False \
    actor_rollout_ref.actor.optim.lr=3e-4 \
    actor_rollout_ref.actor.optim.lr_warmup_steps=3 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.calculate_log_probs=False \
    actor_rollout_ref.model.use_remove_padding=False \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.seed="$SEED" \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.dtype=float32 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
    actor_rollout_ref.rollout.val_kwargs.n=1 \
    "${rollout_args[@]}" \
    custom_reward_function.path="$here/reward.py" \
    custom_reward_function.name=compute_score \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.total_epochs=100 \
    trainer.total_training_steps="$STEPS" \
    trainer.test_freq="$TEST_FREQ" \
    trainer.val_before_train=True \
    trainer.val_only="$VAL_ONLY" \
    trainer.save_freq=-1 \
    trainer.resume_mode=disable \
    trainer.logger=[console,tensorboard] \
    trainer.default_local_dir="$work_dir/checkpoints/$NAME" \
    trainer.project_name=agent_calculator \
    trainer.experiment_name="$NAME" \
    "$@"
