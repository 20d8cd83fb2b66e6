"""Keys whose feature hybridrl does not implement yet: the ONE table to edit when a feature lands.

``error`` rows change what is trained (a run would silently differ from verl): a non-default value
is a ConfigError. ``warn`` rows only affect speed or a backend we lack: a one-time warning, and the
run goes on without it.

A row's key may be a pattern (``fnmatch``: ``*.profiler.tool_config.*``) and its test :data:`NON_DEFAULT`: every
key of the shipped YAML the pattern matches is accepted at its default and refused (or warned about) when set to
anything else. That is how the keys of verl 0.9's capabilities hybridrl lacks (TransferQueue, profilers, MTP,
served distillation teachers, ...) are held: they compose, as in verl, and are never silently ignored.
:data:`READ_AS_IS` lists the verl 0.9 keys hybridrl reads with verl's meaning, and the aliases of
:mod:`hybridrl.utils.config_aliases` the ones it reads under their verl 0.5 names; a test checks that every key
verl 0.9 added is in one of the three.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config.access import get
from hybridrl.config.errors import ConfigProblem, warn_once
from hybridrl.config.loading import flatten_keys, plain_value, to_plain


@dataclass(frozen=True)
class Unsupported:
    """One row: the key, when its value is unsupported, error or warn, and what happens / what to do."""

    key: str  # a dotted key, or an fnmatch pattern over dotted keys
    active: Callable[[Any], bool]  # or NON_DEFAULT: the value differs from the shipped YAML's
    severity: str  # "error" | "warn"
    note: str


def NON_DEFAULT(value: Any) -> bool:  # noqa: N802 - a marker used as a row's test, named like a constant
    """Marker: a row is active when the key's value differs from the shipped default (compared unresolved)."""
    raise AssertionError("NON_DEFAULT is compared against the defaults by check_unsupported, never called")


def _above(limit: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, (int, float)) and value > limit


def _is_true(value: Any) -> bool:
    return value is True


def _is_set(value: Any) -> bool:
    return value is not None


def _lacked(pattern: str, capability: str, fix: str = "leave it at its default") -> Unsupported:
    """A verl 0.9 key of a capability hybridrl lacks that would change the run: refused when not at its default."""
    return Unsupported(pattern, NON_DEFAULT, "error", f"{capability} is not implemented in hybridrl: {fix}.")


def _slower(pattern: str, what: str) -> Unsupported:
    """A verl 0.9 speed, memory or monitoring knob hybridrl has no counterpart for: warned about when set."""
    return Unsupported(
        pattern, NON_DEFAULT, "warn", f"{what} is not implemented in hybridrl; the run goes on without it."
    )


_ACTOR_LEVEL = (
    "hybridrl reads the actor-level key (actor_rollout_ref.actor.<name>, critic.<name>): set that one instead"
)
_NEW_ENGINE = "This setting of verl 0.9's new FSDP engine (hybridrl's FSDP engine takes verl 0.5's fsdp_config keys)"
_REWARD_LOOP = "a served reward model or reward loop (reward.reward_model.rollout, verl 0.9's reward workers)"
_OPTIMIZER = "another optimizer than torch AdamW (optim.optimizer, optimizer_impl, override_optimizer_config)"
_MEGATRON_09 = "this verl 0.9 Megatron engine option"
_SERVED_TEACHER = "This setting of a served (vllm/sglang) teacher (hybridrl's teacher is an FSDP forward, as the reference)"
_SERVED_TEACHER_KNOBS = (
    "dtype", "gpu_memory_utilization", "enforce_eager", "cudagraph_capture_sizes", "free_cache_engine",
    "data_parallel_size", "expert_parallel_size", "tensor_model_parallel_size", "max_num_batched_tokens",
    "max_model_len", "max_num_seqs", "load_format", "engine_kwargs", "limit_images", "enable_chunked_prefill",
    "enable_prefix_caching", "disable_log_stats", "skip_tokenizer_init",
)
_TEACHER_REPLICAS = "Teacher replicas (hybridrl runs every teacher data-parallel over the whole distillation pool)"

# Keys verl 0.9 added for capabilities hybridrl lacks. Patterns match keys of the shipped YAML only.
# fmt: off
_VERL_09_LACKED: tuple[Unsupported, ...] = (
    # --- verl 0.9 systems hybridrl does not have ---
    _lacked("transfer_queue.*", "TransferQueue (verl's distributed data system)"),
    # on-policy distillation: the teacher is an FSDP forward on hf (config/checks_distillation.py), not a served engine
    _slower("distillation.teacher_models.*.num_replicas", _TEACHER_REPLICAS),
    *(_slower(f"distillation.teacher_models.*.inference.{knob}", _SERVED_TEACHER) for knob in _SERVED_TEACHER_KNOBS),
    _lacked("skip.*", "Dumping and replaying rollouts (skip.*)"),
    _lacked("global_profiler.*", "Profiling (nsys, NPU, torch profiler; global_profiler.*)"),
    _lacked("*.profiler.enable", "Profiling (nsys, NPU, torch profiler)"),
    _lacked("*.profiler.tool", "Profiling (nsys, NPU, torch profiler)"),
    _lacked("*.profiler.save_path", "Profiling (nsys, NPU, torch profiler)"),
    _lacked("*.profiler.tool_config.*", "Profiling (nsys, NPU, torch profiler)"),
    _lacked("*qat*", "Quantisation-aware training (QAT)"),
    _lacked("*mtp*", "Multi-token prediction (MTP) training and speculative decoding"),
    _lacked("*disaggregation.*", "Prefill/decode disaggregated serving"),
    _lacked("*router_replay.record_file", "Recording MoE routing to a file (router_replay.record_file)"),
    _lacked("*router_replay.replay_file", "Replaying MoE routing from a file (router_replay.replay_file)"),
    _lacked("*.model.lora.*", "verl 0.9's engine-level LoRA (model.lora.*)",
            "use actor_rollout_ref.model.lora_rank / lora_alpha / target_modules"),
    _lacked("*.model.lora_adapter_path", "Starting from a trained LoRA adapter"),
    _lacked("*.model.hf_config_path", "Loading the model config from another folder"),
    _lacked("critic.model.custom_chat_template", "A chat template of the critic's own"),
    _lacked("critic.model.exclude_modules", "LoRA module exclusion of the critic"),
    # --- data ---
    _lacked("data.train_max_samples", "Capping the training set (data.train_max_samples)"),
    _lacked("data.val_max_samples", "Capping the validation set (data.val_max_samples)"),
    _lacked("data.tool_config_path", "A tool list for the dataset other than the rollout's",
            "set actor_rollout_ref.rollout.multi_turn.tool_config_path"),
    _lacked("data.function_tool_path", "A function-tool list for the dataset other than the rollout's",
            "set actor_rollout_ref.rollout.multi_turn.function_tool_path"),
    _lacked("data.image_patch_size", "Multimodal inputs"),
    _lacked("data.audio_key", "Audio inputs"),
    _lacked("data.continuous_token.*", "Continuous-token (tokenizer-free) prompts"),
    # --- reward: verl 0.9's reward workers ---
    _lacked("reward.reward_model.rollout.*", _REWARD_LOOP),
    _lacked("reward_model.rollout.*", _REWARD_LOOP),
    _lacked("reward_model.num_workers", _REWARD_LOOP),
    _lacked("reward_model.reward_loop_*", _REWARD_LOOP),
    _lacked("*sandbox_fusion.*", "Sandbox Fusion code-execution rewards"),
    # --- actor / ref / critic: verl 0.9's new engine settings hybridrl reads under their 0.5 names ---
    _lacked("actor_rollout_ref.*.fsdp_config.entropy_*", "This copy of the actor-level key", _ACTOR_LEVEL),
    _lacked("actor_rollout_ref.*.fsdp_config.use_torch_compile", "This copy of the actor-level key", _ACTOR_LEVEL),
    _lacked("actor_rollout_ref.*.fsdp_config.pad_to_length", "This copy of the actor-level key", _ACTOR_LEVEL),
    _lacked("actor_rollout_ref.actor.use_remove_padding", "This copy of the model-level key",
            "set actor_rollout_ref.model.use_remove_padding"),
    _lacked("actor_rollout_ref.*.fsdp_config.model_dtype", _NEW_ENGINE),
    _lacked("actor_rollout_ref.*.fsdp_config.pad_to_length_bucket", _NEW_ENGINE),
    _lacked("actor_rollout_ref.*.fsdp_config.forward_only", _NEW_ENGINE),
    _lacked("actor_rollout_ref.*.fsdp_config.strategy", _NEW_ENGINE, "set actor_rollout_ref.actor.strategy"),
    _lacked("actor_rollout_ref.*.fsdp_config.dtype", _NEW_ENGINE),
    _lacked("actor_rollout_ref.ref.fsdp_config.optimizer_offload", _NEW_ENGINE),
    _lacked("actor_rollout_ref.ref.fsdp_config.offload_policy", _NEW_ENGINE),
    _lacked("actor_rollout_ref.ref.fsdp_config.fsdp_size", _NEW_ENGINE),
    _lacked("critic.fsdp.*", "verl 0.9's critic.fsdp section", "set critic.model.fsdp_config.* (and critic.<key>)"),
    _slower("actor_rollout_ref.*.fsdp_config.use_orig_params", "FSDP use_orig_params"),
    _slower("actor_rollout_ref.*.fsdp_config.seed", "The FSDP engine's own seed"),
    _slower("actor_rollout_ref.*.fsdp_config.full_determinism", "Full determinism mode"),
    _lacked("actor_rollout_ref.*.optim.optimizer", _OPTIMIZER),
    _lacked("*.optim.optimizer_impl", _OPTIMIZER),
    _lacked("*.optim.override_optimizer_config", _OPTIMIZER),
    _lacked("critic.optim.optimizer", _OPTIMIZER),
    _lacked("*.optim.clip_grad", "This copy of the gradient clip", "set actor_rollout_ref.actor.grad_clip or critic.grad_clip"),
    _lacked("*.optim.zero_indexed_step", "One-indexed scheduler steps"),
    _lacked("*.optim.use_precision_aware_optimizer", _OPTIMIZER),
    _lacked("*.optim.*_dtype", "Low-precision optimizer state"),
    _lacked("*.optim.use_layer_wise_distributed_optimizer", _OPTIMIZER),
    _lacked("*.optim.muon_*", "The Muon optimizer"),
    _lacked("actor_rollout_ref.*.rollout_n", "A rollout count other than rollout.n", fix="set rollout.n instead"),
    _lacked("actor_rollout_ref.actor.freeze_vision_tower", "Multimodal models"),
    _lacked("actor_rollout_ref.actor.use_prefix_grouper", "verl's prefix grouper",
            "hybridrl's shared-prefix forward is actor_rollout_ref.model.share_prompt_prefix"),
    _lacked("actor_rollout_ref.actor.checkpoint.strict", "Loading checkpoints non-strictly"),
    _lacked("algorithm.filter_groups.max_inflight_gen_batches", "Several generation batches in flight (DAPO)"),
    _lacked("trainer.v1.sync", "verl 0.9's v1 sync-trainer options"),
    _lacked("trainer.v1.sampler.sampler_kwargs", "Custom v1 sampler options"),
    _slower("actor_rollout_ref.actor.calculate_entropy", "Forcing the entropy computation"),
    _slower("*.data_loader_seed", "The mini-batch loader's own seed"),
    _slower("*.checkpoint.async_save", "Asynchronous checkpoint saving"),
    _slower("actor_rollout_ref.*.entropy_from_logits_chunk_size", "A chunk size for the chunked entropy"),
    _slower("actor_rollout_ref.*.pad_to_length", "Padding micro-batches to static lengths"),
    _slower("*.model.tiled_mlp.*", "Tiled MLP"),
    _slower("critic.model.use_liger", "Liger kernels"),
    _slower("critic.model.use_fused_kernels", "Fused kernels"),
    _slower("critic.model.fused_kernel_options.*", "Fused kernels"),
    _slower("actor_rollout_ref.nccl_timeout", "A process-group timeout of the worker"),
    # --- rollout ---
    _lacked("actor_rollout_ref.rollout.data_parallel_size", "Data parallelism inside one inference engine"),
    _lacked("actor_rollout_ref.rollout.expert_parallel_size", "Expert parallelism in the inference engine"),
    _lacked("actor_rollout_ref.rollout.pipeline_model_parallel_size", "Pipeline parallelism in the inference engine"),
    _lacked("actor_rollout_ref.rollout.logprobs_mode", "Another log-prob mode of the inference engine"),
    _lacked("actor_rollout_ref.rollout.over_sample_rate", "Over-sampling and early cut-off of rollouts"),
    _lacked("actor_rollout_ref.rollout.engine_kwargs.trtllm", "The TensorRT-LLM rollout"),
    _lacked("actor_rollout_ref.rollout.quantization*", "A quantised rollout (FP8, ...)"),
    _lacked("actor_rollout_ref.rollout.checkpoint_engine.backend", "Weight-transfer backends (checkpoint engines)",
            "hybridrl syncs the weights in the worker process: leave backend=naive"),
    _lacked("actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs", "Weight-transfer backends (checkpoint engines)"),
    _lacked("actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module", "Weight-transfer backends (checkpoint engines)"),
    _slower("actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes", "A bucket size for the weight transfer"),
    _slower("actor_rollout_ref.rollout.full_determinism", "Deterministic inference"),
    _slower("actor_rollout_ref.rollout.cudagraph_capture_sizes", "Choosing CUDA-graph capture sizes"),
    _slower("actor_rollout_ref.rollout.scheduling_policy", "The inference scheduling policy"),
    _slower("actor_rollout_ref.rollout.skip_tokenizer_init", "Skipping the engine's tokenizer"),
    _slower("actor_rollout_ref.rollout.prometheus.*", "Prometheus metrics of the rollout servers"),
    _slower("actor_rollout_ref.rollout.trace.project_name", "Rollout tracing"),
    _slower("actor_rollout_ref.rollout.trace.experiment_name", "Rollout tracing"),
    _slower("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker", "Rollout tracing"),
    # --- Megatron (ppo_megatron_trainer.yaml) ---
    _lacked("*.megatron.dynamic_context_parallel", _MEGATRON_09),
    _lacked("*.megatron.max_seqlen_per_dp_cp_rank", _MEGATRON_09),
    _lacked("*.megatron.dist_checkpointing_prefix", _MEGATRON_09),
    _lacked("*.megatron.dist_ckpt_optim_fully_reshardable", _MEGATRON_09),
    _lacked("*.megatron.distrib_optim_fully_reshardable_mem_efficient", _MEGATRON_09),
    _lacked("*.megatron.entropy_from_logits_*", _MEGATRON_09, _ACTOR_LEVEL),
    _lacked("*.megatron.override_mcore_model_config", _MEGATRON_09),
    _lacked("*.megatron.vanilla_mbridge", _MEGATRON_09),
    _lacked("*.megatron.use_remove_padding", _MEGATRON_09, "set actor_rollout_ref.model.use_remove_padding"),
    _lacked("*.megatron.pad_bshd_to_minibatch_max", _MEGATRON_09),
    _lacked("*.megatron.pad_to_length*", _MEGATRON_09),
    _lacked("*.megatron.use_megatron_fsdp", "Megatron FSDP"),
    _lacked("*.megatron.forward_only", _MEGATRON_09),
    _lacked("*.megatron.dtype", _MEGATRON_09),
    _lacked("*.megatron.mbridge_config", _MEGATRON_09),
    _lacked("*.checkpoint.mbridge_config", _MEGATRON_09),
)
# fmt: on


_SHM = "loading through /dev/shm is not implemented; files are read directly."

# fmt: off
UNSUPPORTED: dict[str, tuple[Unsupported, ...]] = {
    "ppo_trainer": (
        Unsupported("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template", _is_true, "error", "hybridrl trains on the tokens the engine generated (token-in/token-out); re-rendering earlier turns is not supported: set it to False."),
        Unsupported("actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts", _is_set, "error", "verl does not read it either: use actor_rollout_ref.rollout.n."),
        Unsupported("actor_rollout_ref.rollout.multi_turn.completion_callback", _is_set, "error", "verl 0.5's chat-scheduler callback is not supported: write an agent loop (@register) instead."),
        Unsupported("actor_rollout_ref.rollout.trace.backend", _is_set, "warn", "rollout tracing (weave/mlflow) is not implemented; no traces are written."),
        Unsupported("actor_rollout_ref.rollout.agent.custom_async_server.path", _is_set, "error", "custom async servers are not supported: hybridrl's hf/vllm/sglang servers run in the rollout workers."),
        Unsupported("reward_model.sandbox_fusion.url", _is_set, "error", "Sandbox Fusion code rewards are not supported yet; set it to null."),
        Unsupported("actor_rollout_ref.model.use_liger", _is_true, "warn", "Liger kernels are not implemented; plain PyTorch is used."),
        Unsupported("actor_rollout_ref.model.use_fused_kernels", _is_true, "warn", "fused kernels are not implemented; plain PyTorch is used."),
        Unsupported("data.use_shm", _is_true, "warn", _SHM),
        Unsupported("actor_rollout_ref.model.use_shm", _is_true, "warn",
                    "the model is read from its path (only vLLM's LoRA adapter folders go through /dev/shm)."),
        Unsupported("critic.model.use_shm", _is_true, "warn", _SHM),
        Unsupported("reward_model.model.use_shm", _is_true, "warn", _SHM),
        Unsupported("actor_rollout_ref.rollout.multi_stage_wake_up", _is_true, "warn", "staged wake-up is not implemented; the engine wakes in one step."),
        Unsupported("trainer.profile_steps", _is_set, "warn", "nsys/NPU profiling is not implemented; no profile is written."),
        Unsupported("trainer.default_hdfs_dir", _is_set, "warn", "HDFS is not available; checkpoints stay in trainer.default_local_dir."),
        *_VERL_09_LACKED,
    ),
    "sft_trainer": (
        Unsupported("model.use_liger", _is_true, "warn", "Liger kernels are not implemented; plain PyTorch is used."),
        Unsupported("data.use_shm", _is_true, "warn", _SHM),
        Unsupported("model.use_shm", _is_true, "warn", _SHM),
        Unsupported("trainer.default_hdfs_dir", _is_set, "warn", "HDFS is not available; checkpoints stay local."),
    ),
}
# fmt: on


# verl 0.9 keys hybridrl reads with verl 0.9's meaning (key or fnmatch pattern: where).
READ_AS_IS: dict[str, str] = {
    "*router_replay.mode": "MoE routing replay, disabled | R3 (config/checks_moe.py, docs/models.md)",
    "actor_rollout_ref.rollout.enable_rollout_routing_replay": "the hf rollout records routed experts (R3)",
    "actor_rollout_ref.rollout.moe_load_balance_metrics_interval": "expert-load metrics of the actor's updates",
    "algorithm.rollout_correction.*": "rollout correction (trainer/ppo/rollout_corr_*, docs/rollout-correction.md)",
    "data.mm_processor_kwargs": "passed to the multimodal processor by RLHFDataset",
    "trainer.use_v1": "accepted, one trainer (the async modes are trainer.v1.trainer_mode)",
    "trainer.v1.*": "the async trainer modes (docs/async-training.md)",
    "algorithm.filter_groups.*": "DAPO dynamic sampling (recipes/dapo)",
    "actor_rollout_ref.actor.calculate_sum_pi_squared": "the actor's sum of squared probabilities (optimal token baseline)",
    "actor_rollout_ref.rollout.seed": "the rollout's sampling seed (+ rank)",
    "actor_rollout_ref.rollout.nnodes": "the rollout's own pool (separate_async)",
    "actor_rollout_ref.rollout.n_gpus_per_node": "the rollout's own pool (separate_async)",
    "actor_rollout_ref.rollout.agent.default_agent_loop": "the agent loop of rows without agent_name",
    "actor_rollout_ref.rollout.multi_turn.function_tool_path": "tools from plain Python functions",
    "critic.enable": "the critic on or off (null: from the estimator)",
    "*.optim.betas": "AdamW's betas",
    "critic.optim.lr_warmup_steps": "the critic's warm-up steps",
    "actor_rollout_ref.actor.loss_scale_factor": "the constant normaliser of seq-mean-token-sum-norm",
    "data.gen_batch_size": "prompts per generation batch (null or unset: train_batch_size)",
    "data.seed": "the training sampler's seed",
    "reward.num_workers": "reward-loop workers (experimental/reward_loop; the driver's managers use none)",
    "reward.reward_manager.source": "the reward loop's manager class: register | importlib (experimental/reward_loop)",
    "reward.reward_manager.module.*": "the reward-loop manager class of source=importlib (experimental/reward_loop)",
    "reward_model.enable_resource_pool": "from reward.reward_model.* (utils/config_aliases.py)",
    "reward_model.n_gpus_per_node": "from reward.reward_model.* (utils/config_aliases.py)",
    "reward_model.nnodes": "from reward.reward_model.* (utils/config_aliases.py)",
    "*.profiler.all_ranks": "only read with profiler.enable, which is refused",
    "*.profiler.ranks": "only read with profiler.enable, which is refused",
    "*.megatron.override_ddp_config": "megatron-core DistributedDataParallelConfig overrides (workers/megatron/engine.py)",
    "*.megatron.override_transformer_config.*": "megatron-core TransformerConfig overrides (workers/megatron/model.py)",
    "actor_rollout_ref.ref.megatron.grad_offload": "no effect: the reference has no gradients (as in verl)",
    "actor_rollout_ref.ref.megatron.optimizer_offload": "no effect: the reference has no optimizer (as in verl)",
    "model_engine": "the Hydra group: ppo_trainer.yaml or ppo_megatron_trainer.yaml (config.overrides)",
    "data.apply_chat_template_kwargs": "agent loops render prompts with them (experimental/agent_loop)",
    "actor_rollout_ref.model.tokenizer_path": "the workers load the tokenizer from it (else model.path)",
    "actor_rollout_ref.rollout.enable_prefix_caching": "passed to vLLM (vllm_rollout)",
    "actor_rollout_ref.rollout.engine_kwargs.vllm": "passed to vLLM",
    "actor_rollout_ref.rollout.engine_kwargs.sglang": "passed to SGLang",
    "actor_rollout_ref.actor.tau_pos": "read by policy_loss.loss_mode=sapo only (the loss registry refuses unknown modes)",
    "actor_rollout_ref.actor.tau_neg": "read by policy_loss.loss_mode=sapo only",
    "actor_rollout_ref.actor.policy_loss.dro_beta": "read by policy_loss.loss_mode=dro only",
    "actor_rollout_ref.actor.use_fused_kernels": "follows actor_rollout_ref.model.use_fused_kernels (warned about)",
    "critic.loss_scale_factor": "follows actor_rollout_ref.actor.loss_scale_factor (the value loss's normaliser)",
    "critic.optim.num_cycles": "the cosine schedule (workers/engine/optim.py)",
    "distillation.enabled": "on-policy distillation (trainer/distillation, config/checks_distillation.py)",
    "distillation.distillation_loss.*": "the distillation loss (algos/distillation.py)",
    "distillation.n_gpus_per_node": "the teachers' pool (distillation_pool)",
    "distillation.nnodes": "the teachers' pool (distillation_pool)",
    "distillation.teacher_key": "routes each sample to its teacher",
    "distillation.teacher_models.*.key": "the teacher_key value a teacher scores",
    "distillation.teacher_models.*.model_path": "the teacher's model folder (same tokenizer as the student)",
    "distillation.teacher_models.*.inference.name": "hf only (vllm / sglang teachers are refused)",
    "distillation.teacher_models.*.inference.temperature": "the teacher's log-prob temperature",
    "distillation.teacher_models.*.inference.prompt_length": "the teacher scores the student's whole prompt",
    "distillation.teacher_models.*.inference.response_length": "the teacher scores the student's whole response",
}


def check_unsupported(config: DictConfig, config_name: str = "ppo_trainer") -> list[ConfigProblem]:
    """Problems for ``error`` rows whose value is active; ``warn`` rows are warned about once.

    Rows with a pattern or :data:`NON_DEFAULT` compare the config with its shipped defaults
    (``ppo_megatron_trainer.yaml`` for a tree whose ``model_engine`` is megatron).
    """
    problems: list[ConfigProblem] = []
    plain = to_plain(config)
    context = _DefaultsInContext(plain)
    for row in UNSUPPORTED.get(config_name, ()):
        for key, value in _active_values(row, config, plain, config_name, context):
            if row.severity == "error":
                problems.append(ConfigProblem(key, f"{value!r} is not supported yet.", row.note))
            else:
                warn_once(f"{key}={value!r} is ignored: {row.note}")
    return problems


def _active_values(
    row: Unsupported, config: DictConfig, plain: dict, config_name: str, context: _DefaultsInContext
) -> list[tuple[str, Any]]:
    """(key, value) of every key the row covers whose value makes it active."""
    if row.active is not NON_DEFAULT:
        value = get(config, row.key)
        return [(row.key, value)] if row.active(value) else []
    defaults = _shipped_defaults(_tree_name(plain, config_name))
    active = []
    for key in _matching(row.key, tuple(defaults)):
        value = _raw(plain, key)
        if value is not _ABSENT and value != defaults[key] and not context.resolves_to(key, defaults[key], value):
            active.append((key, value))
    return active


class _DefaultsInContext:
    """Whether an interpolated default (``${oc.select:...}``) gives a value in the user's tree.

    A resolved tree (``main_ppo.complete_config`` resolves the Megatron file's) holds the value of each such
    default, not its ``${...}`` text: that value is still the default. The tree is built once, on first need."""

    def __init__(self, plain: dict) -> None:
        self._plain = plain
        self._tree: DictConfig | None = None

    def resolves_to(self, key: str, default: Any, value: Any) -> bool:
        if not (isinstance(default, str) and "${" in default):
            return False
        if self._tree is None:
            self._tree = OmegaConf.create(self._plain)
        OmegaConf.update(self._tree, key, default)
        try:
            return OmegaConf.select(self._tree, key, throw_on_resolution_failure=False) == value
        finally:
            OmegaConf.update(self._tree, key, value)  # later keys resolve against the user's values


_ABSENT = object()


def _raw(plain: dict, key: str) -> Any:
    """The unresolved value at dotted ``key`` of a plain tree (a section as a dict), or _ABSENT."""
    return plain_value(plain, key, _ABSENT)


def _tree_name(plain: dict, config_name: str) -> str:
    return (
        "ppo_megatron_trainer"
        if config_name == "ppo_trainer" and plain.get("model_engine") == "megatron"
        else config_name
    )


@functools.cache
def _shipped_defaults(name: str) -> dict[str, Any]:
    """Dotted key -> unresolved default of the shipped tree (the Megatron one filled from ppo_trainer, as run)."""
    from hybridrl.utils.config_defaults import with_defaults
    from hybridrl.utils.config_files import load_config

    tree = load_config(name)
    if name == "ppo_megatron_trainer":
        tree = with_defaults(tree, "ppo_trainer")
    return flatten_keys(tree)


@functools.cache
def _matching(pattern: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(key for key in keys if fnmatch.fnmatchcase(key, pattern))
