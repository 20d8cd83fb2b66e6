"""hybridrl.utils.cuda_attention: cuDNN attention is turned off in hybridrl's CUDA processes unless asked for.

The bug it avoids (NaN query gradients from cuDNN's Hopper SDPA backward with a mask, seq_len % 128 == 64) needs a
GPU; it was seen by the GPU kit on an H200 (docs/gpu/gpu_check_h200_2026-12-04*.json). Here: the switch, its
environment variable, and that ``init_distributed(device="cuda")`` applies it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from hybridrl.utils import distributed
from hybridrl.utils.cuda_attention import CUDNN_SDPA_ENV_VAR, configure_sdpa_backends, cudnn_sdpa_requested

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def restore_cudnn_sdp():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.mark.parametrize("value, expected", [(None, False), ("", False), ("0", False), ("off", False),
                                             ("1", True), ("TRUE", True), (" yes ", True)])  # fmt: skip
def test_cudnn_sdpa_is_off_unless_asked_for(value, expected):
    environ = {} if value is None else {CUDNN_SDPA_ENV_VAR: value}
    assert cudnn_sdpa_requested(environ) is expected


def test_a_bad_value_names_the_variable():
    with pytest.raises(ValueError, match=f"{CUDNN_SDPA_ENV_VAR}='maybe'"):
        cudnn_sdpa_requested({CUDNN_SDPA_ENV_VAR: "maybe"})


def test_configure_switches_the_process_wide_flag(restore_cudnn_sdp):
    torch.backends.cuda.enable_cudnn_sdp(True)
    assert configure_sdpa_backends({}) is False
    assert torch.backends.cuda.cudnn_sdp_enabled() is False
    assert configure_sdpa_backends({CUDNN_SDPA_ENV_VAR: "1"}) is True
    assert torch.backends.cuda.cudnn_sdp_enabled() is True


def test_init_distributed_on_cuda_applies_it_before_joining(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed, "configure_sdpa_backends", lambda: calls.append("sdpa"))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(f"set_device {index}"))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kwargs: calls.append(kwargs["backend"]))
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    monkeypatch.setenv("LOCAL_RANK", "0")
    distributed.init_distributed("cuda")
    assert calls == ["sdpa", "set_device 0", "cpu:gloo,cuda:nccl"]
    calls.clear()
    distributed.init_distributed("cpu")
    assert calls == ["gloo"]  # CPU processes keep torch's defaults


def test_the_kits_attention_mask_has_fully_masked_rows_and_the_math_backend_stays_finite():
    """What the GPU check feeds SDPA: causal, row r's first r keys masked, so row r's first r queries see nothing."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    from gpu_check.check_attention import left_padded_causal_mask, nonfinite_gradients

    mask = left_padded_causal_mask(batch=3, length=4, device="cpu")[:, 0]
    assert mask.shape == (3, 4, 4)
    assert mask[0].equal(torch.ones(4, 4, dtype=torch.bool).tril())
    assert mask[2].int().tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    assert nonfinite_gradients(64, "cpu") == 0
