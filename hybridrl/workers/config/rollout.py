"""verl's rollout configs (``verl.workers.config.rollout``); defaults from the YAML's
``actor_rollout_ref.rollout`` and its subsections, see :mod:`hybridrl.base_config`."""

from dataclasses import field

from hybridrl.base_config import BaseConfig, yaml_dataclass

__all__ = [
    "AgentLoopConfig",
    "CheckpointEngineConfig",
    "CustomAsyncServerConfig",
    "MultiTurnConfig",
    "RolloutConfig",
    "SamplingConfig",
    "TraceConfig",
]

ROLLOUT_PATH = "actor_rollout_ref.rollout"


@yaml_dataclass(f"{ROLLOUT_PATH}.val_kwargs", extra_keys=True)
class SamplingConfig(BaseConfig):
    """Sampling parameters (the validation ones: ``rollout.val_kwargs``)."""

    temperature: float
    top_k: int
    top_p: float
    do_sample: bool
    n: int


@yaml_dataclass(f"{ROLLOUT_PATH}.multi_turn", extra_keys=True)
class MultiTurnConfig(BaseConfig):
    """Multi-turn (tool calling / interaction) rollout."""

    _mutable_fields = frozenset({"max_assistant_turns", "max_user_turns"})

    enable: bool
    max_assistant_turns: int | None
    tool_config_path: str | None
    function_tool_path: str | None
    max_user_turns: int | None
    max_parallel_calls: int
    max_tool_response_length: int
    tool_response_truncate_side: str
    use_inference_chat_template: bool
    tokenization_sanity_check_mode: str
    format: str
    num_repeat_rollouts: int | None


@yaml_dataclass(f"{ROLLOUT_PATH}.agent.custom_async_server", extra_keys=True)
class CustomAsyncServerConfig(BaseConfig):
    """A user's async rollout server class (``path`` of the file, ``name`` of the class)."""

    path: str | None
    name: str | None


@yaml_dataclass(f"{ROLLOUT_PATH}.agent", extra_keys=True)
class AgentLoopConfig(BaseConfig):
    """The agent loop workers and the default loop."""

    num_workers: int
    default_agent_loop: str
    agent_loop_config_path: str | None
    custom_async_server: CustomAsyncServerConfig
    agent_loop_manager_class: str | None = None


@yaml_dataclass(f"{ROLLOUT_PATH}.trace", extra_keys=True)
class TraceConfig(BaseConfig):
    """Rollout tracing backend."""

    backend: str | None
    project_name: str | None = None
    experiment_name: str | None = None
    max_samples_per_step_per_worker: int | None = None


@yaml_dataclass(f"{ROLLOUT_PATH}.checkpoint_engine", extra_keys=True)
class CheckpointEngineConfig(BaseConfig):
    """How trained weights reach the rollout engine."""

    _mutable_fields = frozenset({"backend"})

    backend: str | None = "naive"
    update_weights_bucket_megabytes: int = 2048
    engine_kwargs: dict = field(default_factory=dict)
    custom_backend_module: str | None = None


@yaml_dataclass(ROLLOUT_PATH, extra_keys=True)
class RolloutConfig(BaseConfig):
    """The rollout engine (``hf`` | ``vllm`` | ``sglang``), its sampling and its batching."""

    _mutable_fields = frozenset(
        {
            "max_model_len",
            "load_format",
            "engine_kwargs",
            "prompt_length",
            "response_length",
            "expert_parallel_size",
            "moe_tensor_parallel_size",
            "full_determinism",
        }
    )

    name: str | None
    mode: str
    temperature: float
    top_k: int
    top_p: float
    do_sample: bool
    n: int
    prompt_length: int
    response_length: int
    dtype: str
    gpu_memory_utilization: float
    ignore_eos: bool
    enforce_eager: bool
    free_cache_engine: bool
    tensor_model_parallel_size: int
    max_num_batched_tokens: int
    max_model_len: int | None
    max_num_seqs: int
    log_prob_micro_batch_size: int | None
    log_prob_micro_batch_size_per_gpu: int | None
    log_prob_use_dynamic_bsz: bool
    log_prob_max_token_len_per_gpu: int
    disable_log_stats: bool
    multi_stage_wake_up: bool
    engine_kwargs: dict
    calculate_log_probs: bool
    val_kwargs: SamplingConfig
    multi_turn: MultiTurnConfig
    agent: AgentLoopConfig
    trace: TraceConfig
    nnodes: int
    n_gpus_per_node: int
    seed: int
    enable_chunked_prefill: bool
    load_format: str
    layered_summon: bool
    repetition_penalty: float = 1.0
    full_determinism: bool = False
    over_sample_rate: float = 0.0
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    moe_tensor_parallel_size: int = 1
    logprobs_mode: str | None = "processed_logprobs"
    scheduling_policy: str | None = "fcfs"
    enable_prefix_caching: bool = True
    skip_tokenizer_init: bool = True
    enable_rollout_routing_replay: bool = False
    moe_load_balance_metrics_interval: int = 0
    enable_sleep_mode: bool = True
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    custom: dict | None = None
