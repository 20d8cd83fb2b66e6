"""verl 0.5's public helper names resolve at the same paths under hybridrl (docs/verl-parity.md lists the rest).

A name here is one that recipes or user code import from verl; removing or moving it breaks them.
"""

from __future__ import annotations

import importlib
import inspect
import os

import pytest
import torch.distributed as dist

VERL_NAMES = {
    "hybridrl.utils": ["hf_tokenizer", "hf_processor"],
    "hybridrl.utils.py_functional": [
        "timeout_limit", "union_two_dict", "append_to_dict", "NestedNamespace", "DynamicEnumMeta", "DynamicEnum",
        "temp_env_var", "convert_to_regular_types",
    ],
    "hybridrl.utils.ray_utils": ["parallel_put", "ray_noset_visible_devices"],
    "hybridrl.utils.fs": [
        "copy", "exists", "makedirs", "is_non_local", "md5_encode", "get_local_temp_path", "verify_copy",
        "copy_to_shm", "copy_to_local", "copy_local_path_from_hdfs", "local_mkdir_safe",
    ],
    "hybridrl.utils.import_utils": [
        "is_megatron_core_available", "is_vllm_available", "is_sglang_available", "is_nvtx_available",
        "is_trl_available", "import_external_libs", "load_extern_type", "deprecated",
    ],
    "hybridrl.utils.device": [
        "is_torch_npu_available", "is_npu_available", "is_cuda_available", "get_visible_devices_keyword", "get_device_name",
        "get_torch_device", "get_device_id", "get_nccl_backend",
    ],
    "hybridrl.utils.distributed": ["initialize_global_process_group", "destroy_global_process_group"],
    "hybridrl.utils.metric": ["reduce_metrics"],
    "hybridrl.utils.model": ["compute_position_id_with_mask", "update_model_config"],
    "hybridrl.single_controller.ray.base": [
        "RayResourcePool", "RayClassWithInitArgs", "RayWorkerGroup", "create_colocated_worker_cls",
        "create_colocated_worker_raw_cls", "create_colocated_worker_cls_fused", "FusedWorkerCLSName",
        "get_random_string", "func_generator", "sort_placement_group_by_node_ip",
    ],
    "hybridrl.single_controller.base.worker": ["Worker"],
    "hybridrl.trainer.main_ppo": ["main", "run_ppo", "TaskRunner", "create_rl_dataset", "create_rl_sampler"],
    "hybridrl.trainer.ppo.metric_utils": [
        "reduce_metrics", "_compute_response_info", "compute_data_metrics", "compute_timing_metrics",
        "compute_throughout_metrics", "bootstrap_metric", "calc_maj_val", "process_validation_metrics",
    ],
    "hybridrl.experimental.dataset.sampler": ["AbstractSampler", "AbstractCurriculumSampler"],
    "hybridrl.experimental.agent_loop": [
        "AgentLoopBase", "AgentLoopOutput", "AgentLoopMetrics", "AgentLoopManager", "AgentLoopWorker",
        "AsyncLLMServerManager", "register",
    ],
    "hybridrl.experimental.agent_loop.agent_loop": ["AgentLoopBase", "AgentLoopOutput", "register"],
    "hybridrl.experimental.agent_loop.single_turn_agent_loop": ["SingleTurnAgentLoop"],
    "hybridrl.experimental.agent_loop.tool_agent_loop": ["ToolAgentLoop"],
    "hybridrl.experimental.agent_loop.tool_parser": ["ToolParser", "FunctionCall", "HermesToolParser"],
    "hybridrl.experimental.reward_loop": ["RewardLoopManager", "RewardLoopWorker"],
    "hybridrl.experimental.reward_loop.reward_manager": [
        "NaiveRewardManager", "DAPORewardManager", "RateLimitedRewardManager", "RemoteRewardManager", "register",
        "get_reward_manager_cls",
    ],
    "hybridrl.experimental.reward_loop.reward_manager.base": ["RewardManagerBase"],
    "hybridrl.experimental.reward_loop.reward_manager.limited": ["AsyncTokenBucket", "RateLimitedRewardManager"],
    "hybridrl.experimental.reward_loop.reward_manager.remote": ["RemoteRewardManager", "RewardComputeWorker"],
    "hybridrl.tools.base_tool": ["BaseTool", "OpenAIFunctionToolSchema", "ToolResponse"],
    "hybridrl.tools.schemas": ["OpenAIFunctionToolSchema", "OpenAIFunctionParsedSchema", "ToolResponse"],
    "hybridrl.tools.utils.tool_registry": ["initialize_tools_from_config", "get_tool_class"],
    "hybridrl.tools.gsm8k_tool": ["Gsm8kTool"],
    "hybridrl.interactions.base": ["BaseInteraction"],
    "hybridrl.interactions.utils.interaction_registry": ["initialize_interactions_from_config"],
    "hybridrl.workers.fsdp_workers": ["ActorRolloutRefWorker", "AsyncActorRolloutRefWorker", "CriticWorker"],
    "hybridrl.workers.reward_manager": [
        "BatchRewardManager", "DAPORewardManager", "NaiveRewardManager", "PrimeRewardManager", "register",
        "get_reward_manager_cls",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module_name", sorted(VERL_NAMES))
def test_verl_names_resolve(module_name):
    module = importlib.import_module(module_name)
    assert [name for name in VERL_NAMES[module_name] if not hasattr(module, name)] == []


# leading parameters (in order) of verl 0.5 functions that user code calls with positional or keyword arguments
VERL_SIGNATURES = {
    ("hybridrl.utils.tokenizer", "hf_tokenizer"): ["name_or_path", "correct_pad_token", "correct_gemma2"],
    ("hybridrl.utils.dataset.rl_dataset", "create_rl_dataset"): [
        "data_paths", "data_config", "tokenizer", "processor", "is_train",
    ],
    ("hybridrl.utils.dataset.rl_dataset", "create_rl_sampler"): ["data_config", "dataset"],
    ("hybridrl.utils.reward_score", "default_compute_score"): [
        "data_source", "solution_str", "ground_truth", "extra_info", "sandbox_fusion_url", "concurrent_semaphore",
        "memory_limit_mb",
    ],
    ("hybridrl.utils.fs", "copy_to_local"): ["src", "cache_dir", "filelock", "verbose", "always_recopy", "use_shm"],
    ("hybridrl.utils.ray_utils", "parallel_put"): ["data_list", "max_workers"],
    ("hybridrl.utils.py_functional", "timeout_limit"): ["seconds", "use_signals"],
    ("hybridrl.utils.import_utils", "load_extern_type"): ["file_path", "type_name"],
}  # fmt: skip


@pytest.mark.parametrize(("module_name", "function_name"), sorted(VERL_SIGNATURES))
def test_verl_signatures(module_name, function_name):
    function = getattr(importlib.import_module(module_name), function_name)
    expected = VERL_SIGNATURES[(module_name, function_name)]
    assert list(inspect.signature(function).parameters)[: len(expected)] == expected


def test_worker_fused_attributes():
    from hybridrl.single_controller.base import Worker
    from hybridrl.single_controller.base.worker_group import WorkerGroup

    assert Worker.fused_worker_attr_name == "fused_worker_dict"
    assert WorkerGroup.fused_worker_execute_fn_name == "_fuw_execute"
    assert Worker().get_fused_worker_by_name("actor") is None
    assert "RANK" in Worker.env_keys() and callable(Worker.get_availale_master_addr_port)  # verl's spelling
    from hybridrl.single_controller.ray.base import RayWorkerGroup

    assert all(
        isinstance(getattr(RayWorkerGroup, name), property) for name in ("workers", "master_address", "master_port")
    )


def test_device_names_on_this_machine():
    import torch

    from hybridrl.utils.device import (
        get_dist_backend,
        get_nccl_backend,
        get_visible_devices_keyword,
        is_cuda_available,
        is_npu_available,
    )

    assert is_cuda_available is torch.cuda.is_available()  # a bool, as in verl (not a function)
    assert is_npu_available is False and get_visible_devices_keyword() == "CUDA_VISIBLE_DEVICES"
    assert get_nccl_backend() == get_dist_backend()


def test_initialize_global_process_group_single_rank(monkeypatch):
    from hybridrl.single_controller.base.worker import free_port
    from hybridrl.utils.distributed import destroy_global_process_group, initialize_global_process_group

    if dist.is_initialized():
        pytest.skip("a process group already exists in this test process")
    env = {
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HYBRIDRL_DEVICE", "cpu")
    try:
        assert initialize_global_process_group(timeout_second=60) == (0, 0, 1)
        assert dist.is_initialized() and dist.get_world_size() == 1
    finally:
        destroy_global_process_group()
    assert not dist.is_initialized()
    assert os.environ["RANK"] == "0"
