#!/usr/bin/env bash
# Warm start of the calculator agent (CPU, a few minutes): data -> tiny random model -> multi-turn SFT.
#   bash examples/agent_calculator/warm_start.sh [work_dir] [extra SFT key=value overrides]
# Env: SEED (0), SFT_STEPS (600), SFT_LR (2e-3), TOOL_FRACTION (0.4: share of demonstrations that call the tool).
# Writes <work_dir>/data/*.parquet, <work_dir>/model (random init) and <work_dir>/sft_ckpt/global_step_N/huggingface,
# and links that HF folder as <work_dir>/warm_model (what run_cpu.sh loads).
set -euo pipefail
cd "$(dirname "$0")/../.."
work_dir=$(realpath -m "${1:-outputs/agent_calculator}")
shift || true
SEED=${SEED:-0}
SFT_STEPS=${SFT_STEPS:-600}
SFT_LR=${SFT_LR:-2e-3}
TOOL_FRACTION=${TOOL_FRACTION:-0.4}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

python examples/agent_calculator/prepare_data.py --local_dir "$work_dir/data" --seed "$SEED" \
    --tool_fraction "$TOOL_FRACTION"
python examples/agent_calculator/build_model.py --output_dir "$work_dir/model" --seed "$SEED"

# Multi-turn SFT: loss on the assistant turns only (the tool call and the final answer; not the tool's result).
torchrun --standalone --nproc_per_node=2 -m hybridrl.trainer.fsdp_sft_trainer \
    data.train_files="$work_dir/data/sft_train.parquet" data.val_files="$work_dir/data/sft_val.parquet" \
    data.multiturn.enable=True data.multiturn.messages_key=messages \
    data.train_batch_size=64 data.micro_batch_size_per_gpu=32 data.max_length=112 data.truncation=error \
    model.partial_pretrain="$work_dir/model" model.enable_gradient_checkpointing=False \
    optim.lr="$SFT_LR" optim.warmup_steps_ratio=0.05 \
    trainer.total_training_steps="$SFT_STEPS" trainer.test_freq="$SFT_STEPS" trainer.save_freq="$SFT_STEPS" \
    trainer.seed="$SEED" trainer.logger=['console'] trainer.device=cpu trainer.resume_mode=disable \
    trainer.default_local_dir="$work_dir/sft_ckpt" trainer.project_name=agent_calculator trainer.experiment_name=sft "$@"

step=$(cat "$work_dir/sft_ckpt/latest_checkpointed_iteration.txt")
ln -sfn "$work_dir/sft_ckpt/global_step_$step/huggingface" "$work_dir/warm_model"
echo "warm model: $work_dir/warm_model -> $(readlink "$work_dir/warm_model")"
