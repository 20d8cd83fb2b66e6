"""LoRA through ``ActorRolloutRefWorker`` (1 gloo rank, FSDP2; 2 ranks spawned, slow).

One worker walks the whole LoRA life cycle: adapters-only update, ref = base model, rollout gets the
merged weights, checkpoint with ``lora_adapter/``, resume, merger → HF folder with equal logits.
"""

from __future__ import annotations

import os

import pytest
import torch
from config_testlib import compose_config, compose_section
from engine_testlib import run_ranks, single_rank_group

from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask

P, R = 6, 5


def lora_config(model_dir: str, *extra: str):
    """``configs/ppo_trainer.yaml`` for the tiny model with LoRA rank 8 on every linear layer."""
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.response_length=4",
        "actor_rollout_ref.rollout.prompt_length=6",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "data.train_batch_size=4",
        *extra,
    ]
    return compose_config("ppo_trainer", overrides)


def batch(seed: int = 0, size: int = 4) -> DataProto:
    """Left-padded prompts [B, 6] + right-padded responses [B, 5] with the keys update_actor reads."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 500, (size, P + R), generator=gen)
    mask = torch.zeros_like(input_ids)
    for row in range(size):
        mask[row, row % 3 : P + R - (row % 4)] = 1
    tensors = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": input_ids[:, P:],
        "response_mask": mask[:, P:],
        "advantages": torch.randn(size, R, generator=gen) * mask[:, P:],
        "old_log_probs": torch.zeros(size, R),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def base_log_probs(model_dir: str, data: DataProto, model=None) -> torch.Tensor:
    """Response log-probs ``[B, R]`` of a plain HF model (default: the base weights in ``model_dir``)."""
    from transformers import AutoModelForCausalLM

    model = model or AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    b = data.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    logits = logits.logits[:, -R - 1 : -1]
    return valid(torch.log_softmax(logits, -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1), data)


def valid(values: torch.Tensor, data: DataProto) -> torch.Tensor:
    """``values [B, R]`` on the response tokens, 0 elsewhere (the worker skips columns padded in a micro-batch)."""
    return values * data.batch["response_mask"][:, -values.shape[1] :]


def _named(worker) -> dict[str, torch.Tensor]:
    from hybridrl.workers.engine import get_full_state_dict

    return get_full_state_dict(worker.actor_module)


def _update(worker, seed: int) -> None:
    data = batch(seed)
    data.batch["old_log_probs"] = worker.compute_log_prob(batch(seed)).batch["old_log_probs"]
    worker.update_actor(data)


def _prompts() -> DataProto:
    b = batch().batch
    tensors = {k: b[k][:, :P] for k in ("input_ids", "attention_mask", "position_ids")}
    return DataProto.from_dict(tensors=tensors, meta_info={"do_sample": False})


@pytest.fixture(scope="module")
def lora_worker(tiny_model_dir):
    os.environ["HYBRIDRL_DEVICE"] = "cpu"
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    with single_rank_group():
        worker = ActorRolloutRefWorker(lora_config(tiny_model_dir).actor_rollout_ref, role="actor_rollout")
        worker.init_model()
        yield worker


def test_update_changes_adapters_only_and_ref_stays_base(lora_worker, tiny_model_dir):
    worker = lora_worker
    expected_base = base_log_probs(tiny_model_dir, batch(3))
    torch.testing.assert_close(valid(worker.compute_ref_log_prob(batch(3)).batch["ref_log_prob"], batch(3)), expected_base)
    optimised = {id(p) for group in worker.actor_optimizer.param_groups for p in group["params"]}
    trainable = {id(p) for n, p in worker.actor_module.named_parameters() if ".lora_" in n}
    assert optimised == trainable  # only the adapters are in the optimizer
    before = _named(worker)
    _update(worker, 1)
    _update(worker, 2)
    after = _named(worker)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all(".lora_A." in n or ".lora_B." in n for n in changed)
    assert any(".lora_B." in n for n in changed)
    # the policy moved, the reference (adapters disabled) is still exactly the base model
    policy = valid(worker.compute_log_prob(batch(3)).batch["old_log_probs"], batch(3))
    assert (policy - expected_base).abs().max() > 1e-4
    torch.testing.assert_close(valid(worker.compute_ref_log_prob(batch(3)).batch["ref_log_prob"], batch(3)), expected_base)


def test_rollout_gets_merged_weights(lora_worker, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from hybridrl.workers.engine.lora import lora_scalings, merged_state_dict

    worker = lora_worker
    _update(worker, 4)
    out = worker.generate_sequences(_prompts())
    assert not worker.rollout.weights_stale
    merged = merged_state_dict(_named(worker), lora_scalings(worker.actor_module))
    engine_state = worker.rollout.engine.model.state_dict()
    assert set(merged) == set(engine_state)
    for name, value in merged.items():
        torch.testing.assert_close(engine_state[name], value, rtol=0, atol=0)
    # a plain HF model holding the merged weights scores the generated tokens like the LoRA actor
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    plain.load_state_dict(merged)
    scored = out.union(DataProto.from_dict(tensors={"response_mask": out.batch["attention_mask"][:, -4:]}))
    actor = valid(worker.compute_log_prob(scored).batch["old_log_probs"], scored)
    global R
    saved_r, R = R, 4
    try:
        torch.testing.assert_close(actor, base_log_probs(tiny_model_dir, scored, plain), rtol=1e-5, atol=1e-5)
    finally:
        R = saved_r


def test_checkpoint_adapter_resume_and_merge(lora_worker, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from hybridrl.model_merger import merge

    worker = lora_worker
    probe = batch(9)
    saved = valid(worker.compute_log_prob(probe).batch["old_log_probs"], probe)
    ckpt = str(tmp_path / "global_step_3" / "actor")
    worker.save_checkpoint(ckpt, global_step=3)
    assert os.path.exists(os.path.join(ckpt, "lora_adapter", "adapter_config.json"))
    assert os.path.exists(os.path.join(ckpt, "lora_adapter", "adapter_model.safetensors"))
    # the adapter folder alone, on the base model, is the trained policy
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), os.path.join(ckpt, "lora_adapter")
    )
    torch.testing.assert_close(base_log_probs(tiny_model_dir, probe, peft_model), saved, rtol=1e-5, atol=1e-5)
    # resume: train on, load, and the policy is back bit for bit
    _update(worker, 5)
    assert (valid(worker.compute_log_prob(probe).batch["old_log_probs"], probe) - saved).abs().max() > 1e-5
    worker.load_checkpoint(ckpt)
    torch.testing.assert_close(valid(worker.compute_log_prob(probe).batch["old_log_probs"], probe), saved, rtol=0, atol=0)
    # merger: a plain HF folder with the adapters merged in (+ the adapter copied beside it)
    target = merge(ckpt, str(tmp_path / "merged"))
    assert os.path.exists(os.path.join(target, "lora_adapter", "adapter_config.json"))
    merged_model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert not any(".lora_" in name or "base_layer" in name for name in merged_model.state_dict())
    torch.testing.assert_close(base_log_probs(tiny_model_dir, probe, merged_model), saved, rtol=1e-5, atol=1e-5)
    # checkpoint.save_contents with hf_model: huggingface/ holds the merged weights under base names
    from hybridrl.workers.engine import FSDPCheckpointManager

    manager = FSDPCheckpointManager(
        worker.actor_module,
        processing_class=worker.tokenizer,
        checkpoint_config=compose_section("actor_rollout_ref.actor.checkpoint", save_contents=["model", "hf_model"]),
    )
    manager.save_checkpoint(str(tmp_path / "with_hf"), global_step=3)
    exported = AutoModelForCausalLM.from_pretrained(str(tmp_path / "with_hf" / "huggingface"), dtype=torch.float32)
    torch.testing.assert_close(base_log_probs(tiny_model_dir, probe, exported), saved, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- 2 ranks (FSDP2, gloo)


def two_rank_lora(rank: int, world_size: int, model_dir: str) -> dict:
    """On each rank: one LoRA update, then the ref and policy log-probs and a greedy generation."""
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    torch.manual_seed(rank)  # different RNG per rank: adapters must still start equal (broadcast)
    worker = ActorRolloutRefWorker(lora_config(model_dir).actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    shard = batch(1).chunk(world_size)[rank]
    shard.batch["old_log_probs"] = worker.compute_log_prob(batch(1).chunk(world_size)[rank]).batch["old_log_probs"]
    worker.update_actor(shard)
    probe = batch(3).chunk(world_size)[rank]
    out = worker.generate_sequences(_prompts().chunk(world_size)[rank])
    return {
        "ref": worker.compute_ref_log_prob(probe).batch["ref_log_prob"],
        "policy": worker.compute_log_prob(probe).batch["old_log_probs"],
        "responses": out.batch["responses"],
        "trainable": sorted(n for n, p in worker.actor_module.named_parameters() if p.requires_grad),
    }


@pytest.mark.slow
def test_two_rank_fsdp2_lora(tiny_model_dir):
    results = run_ranks(two_rank_lora, 2, tiny_model_dir)
    assert results[0]["trainable"] == results[1]["trainable"]
    assert all(".lora_" in n for n in results[0]["trainable"])
    ref = torch.cat([r["ref"] for r in results])
    torch.testing.assert_close(valid(ref, batch(3)), base_log_probs(tiny_model_dir, batch(3)), rtol=1e-5, atol=1e-5)
    policy = torch.cat([r["policy"] for r in results])
    assert (policy - ref).abs().max() > 1e-4  # the adapters trained
    assert torch.cat([r["responses"] for r in results]).shape == (4, 4)


def test_lora_with_checkpointing_and_packing_and_fsdp1_refused(tiny_model_dir):
    """FSDP2 + gradient checkpointing + use_remove_padding: same LoRA contract; FSDP1 + LoRA: a clear error."""
    from hybridrl.workers.engine.lora import lora_scalings, merged_state_dict
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    extra = (
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.model.use_remove_padding=True",
    )
    with single_rank_group():
        fsdp1 = ActorRolloutRefWorker(
            lora_config(tiny_model_dir, "actor_rollout_ref.actor.strategy=fsdp").actor_rollout_ref, role="actor"
        )
        with pytest.raises(ValueError, match="strategy=fsdp2"):
            fsdp1.init_model()
        worker = ActorRolloutRefWorker(lora_config(tiny_model_dir, *extra).actor_rollout_ref, role="actor_rollout")
        worker.init_model()
        assert len(lora_scalings(worker.actor_module)) == 2 * 7  # 2 layers × q,k,v,o,gate,up,down
        before = _named(worker)
        _update(worker, 1)
        _update(worker, 2)
        after = _named(worker)
        changed = {name for name in before if not torch.equal(before[name], after[name])}
        assert changed and all(".lora_" in n for n in changed)
        expected_base = base_log_probs(tiny_model_dir, batch(3))
        ref = worker.compute_ref_log_prob(batch(3)).batch["ref_log_prob"]
        mask = batch(3).batch["response_mask"].bool()  # packed vs padded forwards agree on valid tokens only
        torch.testing.assert_close(ref[mask], expected_base[mask], rtol=1e-5, atol=1e-5)
        worker.generate_sequences(_prompts())
        engine_state = worker.rollout.engine.model.state_dict()
        for name, value in merged_state_dict(after, lora_scalings(worker.actor_module)).items():
            torch.testing.assert_close(engine_state[name], value, rtol=0, atol=0)
