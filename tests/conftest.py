"""Shared, expensive fixtures: one local Ray cluster per test session, tiny models cached across sessions.

Tests that need Ray take the ``ray_cluster`` fixture; it starts a local cluster once
(with more logical CPUs than cores, so colocated actors and placement groups always fit
on a 2-core machine) and shuts it down at the end of the session.

Where a test runs is in its file name and markers (tests/README.md): ``*_on_gpu.py`` files carry the ``gpu``
marker, and a ``gpu`` test is skipped here, at collection, on a machine without CUDA.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

GPU_SKIP_REASON = "needs a CUDA GPU (a `gpu` test, in an *_on_gpu.py file)"


def pytest_collection_modifyitems(config, items):
    """Skip the ``gpu`` tests without CUDA, before their fixtures build anything."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


TEST_MODEL_CACHE = Path(
    os.environ.get("HYBRIDRL_TEST_MODEL_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybridrl" / "test_models"
)

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


def cached_tiny_model(name: str, spec=None) -> str:
    """A tiny model folder kept across test sessions (``HYBRIDRL_TEST_MODEL_CACHE``, default
    ``~/.cache/hybridrl/test_models``): the vLLM stage alone starts a session per file, each of which built its own.

    The folder's name holds a hash of the spec, of ``hybridrl/utils/tiny_model.py``'s source and of the
    transformers / tokenizers versions (each venv saves in its own format), so any change builds afresh. It is
    built in a staging folder and renamed into place: concurrent sessions never see half a model.
    """
    import hashlib
    import json
    import shutil
    import tempfile
    from dataclasses import asdict

    import tokenizers
    import transformers

    from hybridrl.utils import tiny_model

    spec = spec or tiny_model.TinyModelSpec()
    source = Path(tiny_model.__file__).read_text()
    key_text = json.dumps([asdict(spec), source, transformers.__version__, tokenizers.__version__], sort_keys=True)
    target = TEST_MODEL_CACHE / f"{name}-{hashlib.sha256(key_text.encode()).hexdigest()[:16]}"
    if not (target / "hybridrl_tiny_spec.json").is_file():
        TEST_MODEL_CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=TEST_MODEL_CACHE))
        tiny_model.build_tiny_model(staging, spec)
        try:
            staging.rename(target)
        except OSError:  # another session put its copy there first
            shutil.rmtree(staging, ignore_errors=True)
    return str(target)


@pytest.fixture(scope="session")
def tiny_model_dir():
    """A tiny tied-embedding Qwen2 model + local tokenizer (head_dim 32), cached across sessions."""
    return cached_tiny_model("tiny_qwen2")


@pytest.fixture(scope="session")
def tiny_llama_dir():
    """A tiny untied Llama model + local tokenizer, cached across sessions."""
    from hybridrl.utils.tiny_model import TinyModelSpec

    return cached_tiny_model("tiny_llama", TinyModelSpec(arch="llama", tie_word_embeddings=False))
