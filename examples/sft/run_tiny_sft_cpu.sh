#!/usr/bin/env bash
# SFT on CPU (2 gloo ranks) of a tiny random model on one-digit additions; a minute on a laptop.
#   bash examples/sft/run_tiny_sft_cpu.sh [work_dir] [other key=value overrides]
# Writes <work_dir>/sft_ckpt/global_step_<N>/{rank shards, huggingface/} (huggingface/ = the HF export).
set -euo pipefail
cd "$(dirname "$0")/../.."
work_dir=${1:-outputs/tiny_sft}
shift || true
python scripts/init_random_model.py --output_dir "$work_dir/model"
python examples/data_preprocess/arithmetic.py --local_dir "$work_dir/data" --digits 1 --operators + \
    --train_size 80 --test_size 20
python - "$work_dir/data" <<'PY'
import sys, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
for split, out in (("train", "sft_train"), ("test", "sft_val")):
    rows = pq.read_table(f"{d}/{split}.parquet").to_pylist()
    pairs = [{"question": r["prompt"][0]["content"], "answer": r["reward_model"]["ground_truth"]} for r in rows]
    pq.write_table(pa.Table.from_pylist(pairs), f"{d}/{out}.parquet")
PY
torchrun --standalone --nproc_per_node=2 -m hybridrl.trainer.fsdp_sft_trainer \
    data.train_files="$work_dir/data/sft_train.parquet" data.val_files="$work_dir/data/sft_val.parquet" \
    data.train_batch_size=32 data.micro_batch_size_per_gpu=16 data.max_length=32 \
    model.partial_pretrain="$work_dir/model" model.enable_gradient_checkpointing=False \
    optim.lr=3e-3 optim.warmup_steps_ratio=0.05 \
    trainer.total_training_steps=150 trainer.test_freq=50 trainer.logger=['console'] trainer.device=cpu \
    trainer.default_local_dir="$work_dir/sft_ckpt" trainer.project_name=tiny trainer.experiment_name=sft "$@"
