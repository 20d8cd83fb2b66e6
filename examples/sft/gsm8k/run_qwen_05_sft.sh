#!/usr/bin/env bash
# SFT of Qwen2.5-0.5B-Instruct on GSM8K with FSDP2, as verl's examples/sft/gsm8k/run_qwen_05_sp2.sh (without SP).
# Data: python examples/data_preprocess/gsm8k.py --local_dir $HOME/data/gsm8k
# Usage: bash run_qwen_05_sft.sh <nproc_per_node> <save_path> [other key=value overrides]
set -euo pipefail
if [ "$#" -lt 2 ]; then
    echo "Usage: run_qwen_05_sft.sh <nproc_per_node> <save_path> [other_configs...]"
    exit 1
fi
nproc_per_node=$1
save_path=$2
shift 2

torchrun --standalone --nnodes=1 --nproc_per_node="$nproc_per_node" \
    -m hybridrl.trainer.fsdp_sft_trainer \
    data.train_files="$HOME/data/gsm8k/train.parquet" \
    data.val_files="$HOME/data/gsm8k/test.parquet" \
    data.prompt_key=extra_info \
    data.response_key=extra_info \
    data.prompt_dict_keys=['question'] \
    data.response_dict_keys=['answer'] \
    data.micro_batch_size_per_gpu=4 \
    optim.lr=1e-4 \
    model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct \
    trainer.default_local_dir="$save_path" \
    trainer.project_name=gsm8k-sft \
    trainer.experiment_name=gsm8k-sft-qwen-2.5-0.5b-instruct \
    trainer.logger=['console','tensorboard'] \
    trainer.total_epochs=3 "$@"
# The final checkpoint's HF folder starts RL: actor_rollout_ref.model.path=$save_path/global_step_<N>/huggingface
