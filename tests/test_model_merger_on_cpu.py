"""model_merger: FSDP checkpoint shards → standard HF folder that reloads with identical logits."""

import json
import os
import socket

import pytest
import torch
import torch.distributed as dist
from config_testlib import compose_section
from safetensors import safe_open

from hybridrl import model_merger
from hybridrl.workers.engine import (
    FSDPCheckpointManager,
    apply_fsdp,
    build_optimizer,
    build_tokenizer,
    clip_grad_and_step,
    load_hf_model,
)

FSDP_CONFIG = compose_section("actor_rollout_ref.actor.fsdp_config")


@pytest.fixture(scope="module", autouse=True)
def gloo_group():
    """One-rank gloo group (FSDP needs a process group)."""
    if dist.is_initialized():
        yield
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _trained_checkpoint(model_dir, path, kind="causal_lm", strategy="fsdp2"):
    """Wrap, take one optimizer step, save; return the trained module."""
    module, _ = load_hf_model(model_dir, kind=kind)
    module = apply_fsdp(module, FSDP_CONFIG, strategy=strategy)
    optimizer = build_optimizer(module, compose_section("actor_rollout_ref.actor.optim", lr=1e-2))
    ids = torch.randint(4, 500, (2, 10), generator=torch.Generator().manual_seed(0))
    out = module(input_ids=ids)
    out.logits.float().pow(2).mean().backward()
    assert clip_grad_and_step(module, optimizer, max_norm=1.0)[1]
    FSDPCheckpointManager(module, optimizer, None, build_tokenizer(model_dir), None).save_checkpoint(
        path, global_step=1
    )
    return module


# Same fp32 weights on both sides; 1e-6 absorbs kernel-path differences (alignment, threads) seen at 3e-8.


def _ids():
    return torch.randint(4, 500, (3, 9), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_merge_tied_model_reloads_with_identical_logits(tiny_model_dir, tmp_path, strategy):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local_dir = str(tmp_path / "global_step_1" / "actor")
    trained = _trained_checkpoint(tiny_model_dir, local_dir, strategy=strategy)
    target = str(tmp_path / "merged")
    model_merger.main(["merge", "--backend", "fsdp", "--local_dir", local_dir, "--target_dir", target])

    with safe_open(os.path.join(target, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys  # tied: stored once
    reloaded = AutoModelForCausalLM.from_pretrained(target)
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=_ids()).logits, trained(input_ids=_ids()).logits, rtol=0, atol=1e-6
        )
    assert AutoTokenizer.from_pretrained(target).pad_token is not None


def test_merge_untied_llama_keeps_lm_head(tiny_llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    local_dir = str(tmp_path / "global_step_1" / "actor")
    trained = _trained_checkpoint(tiny_llama_dir, local_dir)
    target = model_merger.merge(local_dir, str(tmp_path / "merged"))
    with safe_open(os.path.join(target, "model.safetensors"), "pt") as f:
        assert "lm_head.weight" in set(f.keys())
    reloaded = AutoModelForCausalLM.from_pretrained(target)
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=_ids()).logits, trained(input_ids=_ids()).logits, rtol=0, atol=1e-6
        )


def test_merge_value_model(tiny_model_dir, tmp_path):
    from transformers import AutoModelForTokenClassification

    local_dir = str(tmp_path / "global_step_1" / "critic")
    trained = _trained_checkpoint(tiny_model_dir, local_dir, kind="token_classification")
    config = json.loads(open(os.path.join(local_dir, "huggingface", "config.json")).read())
    assert config["architectures"] == ["Qwen2ForTokenClassification"] and len(config["id2label"]) == 1  # num_labels=1
    reloaded = AutoModelForTokenClassification.from_pretrained(model_merger.merge(local_dir, str(tmp_path / "merged")))
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=_ids()).logits, trained(input_ids=_ids()).logits, rtol=0, atol=1e-6
        )


def test_test_subcommand_detects_matching_and_different_weights(tiny_model_dir, tmp_path):
    local_dir = str(tmp_path / "global_step_1" / "actor")
    _trained_checkpoint(tiny_model_dir, local_dir)
    target = model_merger.merge(local_dir, str(tmp_path / "merged"))
    model_merger.main(["test", "--backend", "fsdp", "--local_dir", local_dir, "--test_hf_dir", target])
    with pytest.raises(AssertionError):  # the untrained original differs after one step
        model_merger.check_against(local_dir, tiny_model_dir)


def test_missing_fsdp_config_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="fsdp_config.json"):
        model_merger.merge(str(tmp_path), str(tmp_path / "out"))
