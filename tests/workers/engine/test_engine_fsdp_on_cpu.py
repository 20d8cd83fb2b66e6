"""FSDP2 / FSDP1 wrapping on one gloo rank: logits, training steps, state dicts, offload, precision."""

import pytest
import torch
from config_testlib import compose_section
from engine_testlib import single_rank_group
from omegaconf import OmegaConf
from torch.distributed.tensor import DTensor

from hybridrl.workers.engine import (
    MixedPrecisionDtypes,
    apply_fsdp,
    build_optimizer,
    clip_grad_and_step,
    enable_gradient_checkpointing,
    fsdp_version,
    get_full_state_dict,
    iter_full_state_dict,
    load_full_state_dict,
    load_hf_model,
    load_model,
    load_optimizer,
    offload_model,
    offload_optimizer,
)

FSDP_CONFIG = compose_section("actor_rollout_ref.actor.fsdp_config")
OPTIM = compose_section("actor_rollout_ref.actor.optim", lr=1e-2)


@pytest.fixture(scope="module", autouse=True)
def gloo_group():
    with single_rank_group():
        yield


@pytest.fixture(params=["tiny_model_dir", "tiny_llama_dir"], ids=["qwen2_tied", "llama_untied"])
def model_dir(request):
    return request.getfixturevalue(request.param)


def _batch(seed=0, batch=2, length=12):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, 500, (batch, length), generator=g)
    return {"input_ids": input_ids, "labels": input_ids}


def _wrapped(model_dir, strategy="fsdp2", fsdp_config=FSDP_CONFIG, **kwargs):
    reference, _ = load_hf_model(model_dir)
    module, _ = load_hf_model(model_dir)
    return reference, apply_fsdp(module, fsdp_config, strategy=strategy, **kwargs)


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_wrapped_forward_equals_plain_hf_logits(model_dir, strategy):
    reference, wrapped = _wrapped(model_dir, strategy)
    batch = _batch()
    with torch.no_grad():
        expected = reference(input_ids=batch["input_ids"]).logits
        actual = wrapped(input_ids=batch["input_ids"]).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)
    assert fsdp_version(wrapped) == (2 if strategy == "fsdp2" else 1)


def test_fsdp2_shards_params_and_keeps_tied_embeddings_tied(tiny_model_dir, tiny_llama_dir):
    _, qwen = _wrapped(tiny_model_dir)
    assert all(isinstance(p, DTensor) for p in qwen.parameters())
    assert qwen.lm_head.weight is qwen.model.embed_tokens.weight  # one parameter, one optimizer state
    _, llama = _wrapped(tiny_llama_dir)
    assert llama.lm_head.weight is not llama.model.embed_tokens.weight


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_one_step_changes_params_and_zero_lr_does_not(tiny_model_dir, strategy):
    for lr, should_change in [(1e-2, True), (0.0, False)]:
        _, wrapped = _wrapped(tiny_model_dir, strategy)
        before = get_full_state_dict(wrapped)
        optimizer = build_optimizer(wrapped, OmegaConf.merge(OPTIM, {"lr": lr}))
        loss = wrapped(**_batch()).loss
        loss.backward()
        grad_norm, stepped = clip_grad_and_step(wrapped, optimizer, max_norm=1.0)
        assert stepped and grad_norm > 0
        after = get_full_state_dict(wrapped)
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        assert bool(changed) == should_change, (lr, changed[:3])


def test_fsdp2_non_finite_loss_skips_the_step(tiny_model_dir):
    _, wrapped = _wrapped(tiny_model_dir)
    before = get_full_state_dict(wrapped)
    optimizer = build_optimizer(wrapped, OPTIM)
    (wrapped(**_batch()).loss * float("nan")).backward()
    grad_norm, stepped = clip_grad_and_step(wrapped, optimizer, max_norm=1.0)
    assert grad_norm != grad_norm  # NaN
    assert not stepped and optimizer.num_skipped_steps == 1
    after = get_full_state_dict(wrapped)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_gradient_checkpointing_gives_the_same_loss_and_grad_norm(tiny_model_dir):
    results = []
    for checkpointing in (False, True):
        module, _ = load_hf_model(tiny_model_dir)
        if checkpointing:
            enable_gradient_checkpointing(module)
        wrapped = apply_fsdp(module, FSDP_CONFIG)
        wrapped.train()
        loss = wrapped(**_batch()).loss
        loss.backward()
        grad_norm, _ = clip_grad_and_step(wrapped, build_optimizer(wrapped, OPTIM), max_norm=1e9)
        results.append((loss.item(), grad_norm))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-6)
    assert results[1][1] == pytest.approx(results[0][1], rel=1e-5)


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_iter_full_state_dict_names_and_values_match_hf(model_dir, strategy):
    reference, wrapped = _wrapped(model_dir, strategy)
    expected = reference.state_dict()
    got = dict(iter_full_state_dict(wrapped))
    assert set(got) == set(expected)
    for name, tensor in expected.items():
        assert not isinstance(got[name], DTensor)
        assert torch.equal(got[name], tensor), name


def test_load_full_state_dict_restores_weights(tiny_model_dir):
    reference, wrapped = _wrapped(tiny_model_dir)
    original = reference.state_dict()
    optimizer = build_optimizer(wrapped, OPTIM)
    wrapped(**_batch()).loss.backward()
    clip_grad_and_step(wrapped, optimizer, max_norm=1.0)
    load_full_state_dict(wrapped, original)
    restored = get_full_state_dict(wrapped)
    assert all(torch.equal(restored[k], original[k]) for k in original)


def test_offload_policy_on_cpu_and_manual_offload_are_usable(tiny_model_dir):
    config = OmegaConf.merge(FSDP_CONFIG, {"offload_policy": True})  # CPUOffloadPolicy(pin_memory=False)
    reference, wrapped = _wrapped(tiny_model_dir, fsdp_config=config)
    optimizer = build_optimizer(wrapped, OPTIM)
    wrapped(**_batch()).loss.backward()
    assert clip_grad_and_step(wrapped, optimizer, max_norm=1.0)[1]
    before = get_full_state_dict(wrapped)
    offload_model(wrapped), offload_optimizer(optimizer)  # no-ops on CPU
    load_model(wrapped), load_optimizer(optimizer)
    after = get_full_state_dict(wrapped)
    assert all(torch.equal(before[k], after[k]) for k in before)
    with torch.no_grad():
        assert torch.isfinite(wrapped(input_ids=_batch()["input_ids"]).logits).all()


def test_bf16_mixed_precision_keeps_fp32_master_weights(tiny_model_dir):
    bf16 = MixedPrecisionDtypes(torch.bfloat16, torch.float32, torch.float32)
    reference, wrapped = _wrapped(tiny_model_dir, mixed_precision=bf16)
    batch = _batch()
    with torch.no_grad():
        expected = reference(input_ids=batch["input_ids"]).logits
        actual = wrapped(input_ids=batch["input_ids"]).logits
    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual.float(), expected, rtol=0.05, atol=0.05)  # bf16 has ~3 significant digits
    wrapped(**batch).loss.backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in wrapped.parameters())


def test_token_classification_model_for_critic(tiny_model_dir):
    module, config = load_hf_model(tiny_model_dir, kind="token_classification")
    assert config.num_labels == 1 and config.classifier_dropout == 0.0
    wrapped = apply_fsdp(module, FSDP_CONFIG)
    with torch.no_grad():
        values = wrapped(input_ids=_batch(batch=3, length=7)["input_ids"]).logits
    assert values.shape == (3, 7, 1)


def test_unknown_strategy_is_a_clear_error(tiny_model_dir):
    module, _ = load_hf_model(tiny_model_dir)
    with pytest.raises(ValueError, match="strategy"):
        apply_fsdp(module, FSDP_CONFIG, strategy="megatron")
