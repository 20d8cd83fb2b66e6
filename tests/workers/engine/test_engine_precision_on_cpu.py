"""Model dtype and mixed-precision resolution from fsdp_config (verl's code defaults; fp32 on CPU)."""

import pytest
import torch
from omegaconf import OmegaConf

from hybridrl.workers.engine.precision import resolve_mixed_precision, resolve_model_dtype, to_dtype


def test_to_dtype_accepts_verl_names():
    assert to_dtype("bf16") is torch.bfloat16
    assert to_dtype("bfloat16") is torch.bfloat16
    assert to_dtype("fp32") is torch.float32
    assert to_dtype("torch.float16") is torch.float16
    assert to_dtype(torch.float32) is torch.float32
    with pytest.raises(ValueError, match="Unknown dtype"):
        to_dtype("int3")


def test_model_dtype_defaults_follow_verl_on_gpu_and_fp32_on_cpu():
    empty = OmegaConf.create({"param_offload": False})
    # verl: trainable (actor/critic) fp32 master weights, frozen (ref/RM) bf16
    assert resolve_model_dtype(empty, trainable=True, device_name="cuda") is torch.float32
    assert resolve_model_dtype(empty, trainable=False, device_name="cuda") is torch.bfloat16
    # hybridrl on CPU: fp32 unless configured
    assert resolve_model_dtype(empty, trainable=False, device_name="cpu") is torch.float32
    configured = OmegaConf.create({"model_dtype": "bf16"})
    assert resolve_model_dtype(configured, trainable=True, device_name="cpu") is torch.bfloat16


def test_mixed_precision_defaults_and_partial_override():
    gpu = resolve_mixed_precision(OmegaConf.create({}), device_name="cuda")
    assert (gpu.param_dtype, gpu.reduce_dtype, gpu.buffer_dtype) == (torch.bfloat16, torch.float32, torch.float32)
    cpu = resolve_mixed_precision(None, device_name="cpu")
    assert cpu.is_full_precision
    # only param_dtype given: the others keep their defaults
    partial = resolve_mixed_precision(OmegaConf.create({"mixed_precision": {"param_dtype": "bf16"}}), device_name="cpu")
    assert (partial.param_dtype, partial.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert not partial.is_full_precision
