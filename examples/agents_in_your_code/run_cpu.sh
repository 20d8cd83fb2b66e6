#!/usr/bin/env bash
# GRPO of calculator_agent.py (an agent written with the openai package only) through the training endpoint, on CPU.
#   bash examples/agent_calculator/warm_start.sh outputs/agents_in_your_code    # once: data + warm-started tiny model
#   bash examples/agents_in_your_code/run_cpu.sh outputs/agents_in_your_code [extra key=value overrides]
# Env:
#   SEED (0)       data.seed (shuffling) and rollout.seed (sampling)
#   STEPS (20)     GRPO steps; validation (the 128 held-out questions, 1 sample each at T=1) every TEST_FREQ (5)
#   MODEL          model folder (default <work_dir>/warm_model, written by warm_start.sh)
#   NAME           experiment name (default openai_agent_seed<SEED>)
# Metrics: TensorBoard events in <work_dir>/tensorboard/<NAME>, JSONL in <work_dir>/metrics/<NAME>.jsonl;
# plot them with plot.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=examples/agents_in_your_code
work_dir=$(realpath -m "${1:-outputs/agents_in_your_code}")
shift || true
SEED=${SEED:-0}
STEPS=${STEPS:-20}
TEST_FREQ=${TEST_FREQ:-5}
MODEL=${MODEL:-$work_dir/warm_model}
NAME=${NAME:-openai_agent_seed$SEED}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
    RAY_DEDUP_LOGS=0 TENSORBOARD_DIR="$work_dir/tensorboard/$NAME" \
    VERL_FILE_LOGGER_PATH="$work_dir/metrics/$NAME.jsonl"
mkdir -p "$work_dir/metrics"
rm -f "$VERL_FILE_LOGGER_PATH"

# the calculator task's rows (examples/agent_calculator/prepare_data.py), routed to the openai_agent loop
python $here/prepare_data.py --src_dir "$work_dir/data" --local_dir "$work_dir/data_openai"

# No multi_turn / tool_config: the agent runs its tool itself. No custom_reward_function: the agent returns the reward.
python -m hybridrl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$work_dir/data_openai/train.parquet" \
    data.val_files="$work_dir/data_openai/test.parquet" \
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
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.agent.num_workers=2 \
    actor_rollout_ref.rollout.agent.custom_rollout_function.path="$here/calculator_agent.py" \
    actor_rollout_ref.rollout.agent.custom_rollout_function.name=rollout \
    actor_rollout_ref.rollout.agent.custom_rollout_function.timeout_s=120 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.seed="$SEED" \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.dtype=float32 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
    actor_rollout_ref.rollout.val_kwargs.n=1 \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.total_epochs=100 \
    trainer.total_training_steps="$STEPS" \
    trainer.test_freq="$TEST_FREQ" \
    trainer.val_before_train=True \
    trainer.save_freq=-1 \
    trainer.resume_mode=disable \
    trainer.logger=[console,tensorboard,file] \
    trainer.default_local_dir="$work_dir/checkpoints/$NAME" \
    trainer.project_name=agents_in_your_code \
    trainer.experiment_name="$NAME" \
    "$@"
