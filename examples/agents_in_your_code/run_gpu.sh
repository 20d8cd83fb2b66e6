#!/usr/bin/env bash
# calculator_agent.py (openai package only) trained on GPUs in verl's style: GRPO of Qwen2.5-0.5B-Instruct (or
# 1.5B: MODEL=...), vLLM in server mode, one node; the agent talks to each worker's OpenAI-compatible endpoint.
# Status: written, NOT run here (no GPU on the development machine); the CPU run is run_cpu.sh.
# An instruct model already writes hermes tool calls (<tool_call>{json}</tool_call>) when the chat template lists
# the request's `tools`, so no SFT warm start:
#   python examples/agent_calculator/prepare_data.py --local_dir ~/data/agent_calculator
#   python examples/agents_in_your_code/prepare_data.py --src_dir ~/data/agent_calculator \
#       --local_dir ~/data/agents_in_your_code
#   bash examples/agents_in_your_code/run_gpu.sh [extra key=value overrides, e.g. trainer.n_gpus_per_node=4]
set -xeuo pipefail
DATA="${DATA:-$HOME/data/agents_in_your_code}"
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
HERE="$(cd "$(dirname "$0")" && pwd)"

python3 -m hybridrl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=128 \
    data.max_prompt_length=512 \
    data.max_response_length=512 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
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
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
    actor_rollout_ref.rollout.multi_turn.format=hermes \
    actor_rollout_ref.rollout.agent.num_workers=8 \
    actor_rollout_ref.rollout.agent.custom_rollout_function.path="$HERE/calculator_agent.py" \
    actor_rollout_ref.rollout.agent.custom_rollout_function.name=rollout \
    actor_rollout_ref.rollout.agent.custom_rollout_function.timeout_s=300 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    trainer.critic_warmup=0 \
    trainer.logger='[console,tensorboard]' \
    trainer.project_name=hybridrl_agents_in_your_code \
    trainer.experiment_name=qwen2_5_0_5b_calculator_openai_agent \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.total_epochs=5 \
    "$@"
