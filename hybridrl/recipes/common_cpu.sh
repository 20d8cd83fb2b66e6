# Sourced by hybridrl/recipes/*/run_*_cpu.sh: the tiny CPU set-up every recipe shares.
#   - a tiny random Qwen2 model + local tokenizer (hybridrl.models.tiny), built once;
#   - one-digit addition prompts in verl's parquet schema (examples/data_preprocess/arithmetic.py), built once;
#   - CPU_ARGS: 2 CPU worker processes (FSDP2 over gloo), hf rollout, float32, small batches.
# Override MODEL_PATH / DATA_DIR to use your own; REWARD_FN picks a custom reward (a random tiny model cannot do
# arithmetic, so by default the recipes reward digit-heavy answers, which it can learn in a few steps).
RECIPES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$RECIPES_DIR/../.." && pwd)
WORK_DIR=${WORK_DIR:-$HOME/.cache/hybridrl-recipes}
MODEL_PATH=${MODEL_PATH:-$WORK_DIR/tiny_qwen2}
DATA_DIR=${DATA_DIR:-$WORK_DIR/arithmetic}
REWARD_FN=${REWARD_FN:-$RECIPES_DIR/digit_reward.py}

if [ ! -f "$MODEL_PATH/config.json" ]; then
  python -c "import sys; from hybridrl.models.tiny import build_tiny_model; build_tiny_model(sys.argv[1])" \
    "$MODEL_PATH"
fi
if [ ! -f "$DATA_DIR/train.parquet" ]; then
  python "$REPO_ROOT/examples/data_preprocess/arithmetic.py" --local_dir "$DATA_DIR" \
    --train_size 84 --test_size 16 --digits 1 --operators +  # 100 distinct one-digit sums in all
fi

CPU_ARGS=(
  data.train_files="$DATA_DIR/train.parquet"
  data.val_files="$DATA_DIR/test.parquet"
  data.train_batch_size=8
  data.max_prompt_length=64
  data.max_response_length=8
  data.dataloader_num_workers=0
  custom_reward_function.path="$REWARD_FN"
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.enable_gradient_checkpointing=False
  actor_rollout_ref.actor.ppo_mini_batch_size=4
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
  actor_rollout_ref.actor.optim.lr=1e-3
  actor_rollout_ref.rollout.name=hf
  actor_rollout_ref.rollout.mode=sync
  actor_rollout_ref.rollout.calculate_log_probs=False
  actor_rollout_ref.rollout.seed=0
  actor_rollout_ref.model.use_remove_padding=False
  critic.model.use_remove_padding=False
  actor_rollout_ref.rollout.n=4
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.dtype=float32
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16
  trainer.device=cpu
  trainer.n_gpus_per_node=2
  trainer.nnodes=1
  trainer.total_epochs=1
  trainer.total_training_steps=15
  trainer.test_freq=5
  trainer.save_freq=-1
  trainer.logger='[console]'
)
