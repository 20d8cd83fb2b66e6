# Sourced by hybridrl/recipes/*/run_*_gpu.sh: verl's GSM8K set-up on one node of 8 GPUs with vLLM rollout.
# Prepare the data first: python examples/data_preprocess/gsm8k.py --local_dir "$HOME/data/gsm8k"
# Override with environment variables (MODEL_PATH, DATA_DIR, NNODES, N_GPUS) or trailing key=value arguments.
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
NNODES=${NNODES:-1}
N_GPUS=${N_GPUS:-8}

GPU_ARGS=(
  data.train_files="$DATA_DIR/train.parquet"
  data.val_files="$DATA_DIR/test.parquet"
  data.train_batch_size=1024
  data.max_prompt_length=512
  data.max_response_length=1024
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=256
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.mode=sync
  actor_rollout_ref.rollout.calculate_log_probs=False
  actor_rollout_ref.rollout.tensor_model_parallel_size=2
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.n=5
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
  actor_rollout_ref.ref.fsdp_config.param_offload=True
  trainer.critic_warmup=0
  trainer.logger='[console,wandb]'
  trainer.n_gpus_per_node="$N_GPUS"
  trainer.nnodes="$NNODES"
  trainer.save_freq=20
  trainer.test_freq=5
  trainer.total_epochs=15
)
