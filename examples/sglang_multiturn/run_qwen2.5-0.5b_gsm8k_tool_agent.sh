#!/usr/bin/env bash
# Multi-turn GRPO with a tool on GSM8K: Qwen2.5-0.5B-Instruct, one node, 8 GPUs, FSDP2, vLLM in server mode.
# verl's example of the same name (examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh) scaled to 0.5B:
# the model calls calc_gsm8k_reward (hybridrl.tools.gsm8k_tool.Gsm8kTool) to check its answer before replying.
# Status: written, not run (no GPU here). Needs the `vllm` extra and the multi-turn data:
#   python examples/data_preprocess/gsm8k_multiturn_w_tool.py --input ~/gsm8k --local_dir ~/data/gsm8k_tool
# Extra arguments are appended as Hydra overrides, e.g. trainer.n_gpus_per_node=4.
set -xeuo pipefail
DATA="${DATA:-$HOME/data/gsm8k_tool}"
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
HERE="$(cd "$(dirname "$0")" && pwd)"

python3 -m hybridrl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.multi_turn.enable=True \
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5 \
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/config/tool_config/gsm8k_tool_config.yaml" \
    actor_rollout_ref.rollout.agent.num_workers=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.rollout_probs_diff_max_bound=0.5 \
    trainer.logger='[console,tensorboard]' \
    trainer.project_name=hybridrl_gsm8k_tool_agent \
    trainer.experiment_name=qwen2_5_0_5b_gsm8k_tool_agent \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=20 \
    trainer.test_freq=10 \
    trainer.total_epochs=15 \
    "$@"
