"""The SGLang rollout on a CUDA GPU: generate from the tiny model through the rollout handle, weights synced."""

from __future__ import annotations

import pytest
from rollout_testlib import make_prompts, model_config, rollout_config

pytestmark = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


def test_sglang_contract_on_gpu(tiny_model_dir, tokenizer, actor):
    pytest.importorskip("sglang")
    from hybridrl.workers.sharding_manager import build_rollout_handle

    handle = build_rollout_handle(
        rollout_config(name="sglang", dtype="float32"),
        model_config(tiny_model_dir),
        tokenizer=tokenizer,
        hf_config=actor.config,
        actor_module=actor.cuda(),
        device_name="cuda",
    )
    out = handle.generate_sequences(make_prompts(tokenizer, do_sample=False))
    assert out.batch["responses"].shape == (4, 8)
    assert handle.verify() >= 1
