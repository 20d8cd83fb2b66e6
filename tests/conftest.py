"""Shared, expensive fixtures: one local Ray cluster per test session, cached tiny models.

Tests that need Ray take the ``ray_cluster`` fixture; it starts a local cluster once
(with more logical CPUs than cores, so colocated actors and placement groups always fit
on a 2-core machine) and shuts it down at the end of the session.

Where a test runs is in its file name and markers (tests/README.md): ``*_on_gpu.py`` files carry the ``gpu``
marker, and a ``gpu`` test is skipped here, at collection, on a machine without CUDA.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

GPU_SKIP_REASON = "needs a CUDA GPU (a `gpu` test, in an *_on_gpu.py file)"


def pytest_collection_modifyitems(config, items):
    """Mark the reliability campaign's tests ``reliability``; skip the ``gpu`` tests without CUDA, before their
    fixtures build anything."""
    from reliability_campaign import mark_reliability_campaign

    mark_reliability_campaign(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


# Logical CPUs the shared test cluster advertises (real cores are 2; Ray actors here are idle most of the time).
TEST_RAY_NUM_CPUS = 16


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster shared by the whole test session, started by hybridrl's ``init_ray``."""
    import ray

    if not ray.is_initialized():  # as the trainer starts it: 127.0.0.1 only, token auth with a per-run token
        from hybridrl.utils.ray_utils import init_ray

        init_ray({"num_cpus": TEST_RAY_NUM_CPUS}, device="cpu", env_vars={"TOKENIZERS_PARALLELISM": "false"})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny tied-embedding Qwen2 model + local tokenizer (head_dim 32), built once per session."""
    from hybridrl.models.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2")))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A tiny untied Llama model + local tokenizer, built once per session."""
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(arch="llama", tie_word_embeddings=False)
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_llama"), spec))


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    """``tiny_vlm_dir(family)``: the folder of a tiny random VLM of ``family`` (``hybridrl.models.tiny_vlm.FAMILIES``)
    with its processor files, built once per session per family."""
    from hybridrl.models.tiny_vlm import build_tiny_vlm

    root = tmp_path_factory.mktemp("tiny_vlm")
    return lambda family: str(build_tiny_vlm(root / family, family))
