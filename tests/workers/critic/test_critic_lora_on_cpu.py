"""Critic LoRA through ``CriticWorker`` (1 gloo rank, FSDP2): ``critic.model.lora_rank=8``.

Only the adapters (``lora_A``/``lora_B``) and the freshly initialised value head (peft ``modules_to_save``
copy of ``score``) train; the critic learns; a checkpoint round-trips bit for bit and carries
``lora_adapter/``; the model merger writes a plain token-classification HF folder with the same values.
"""

from __future__ import annotations

import os

import pytest
import torch
from config_testlib import compose_config, compose_section
from omegaconf import OmegaConf

from hybridrl.protocol import DataProto
from tests.workers.fsdp_workers_testlib import RESPONSE_LEN as R
from tests.workers.fsdp_workers_testlib import ppo_batch

HEAD_COPY = "base_model.model.score.modules_to_save.default."


pytestmark = pytest.mark.usefixtures("single_rank_env")  # a 1-rank gloo group (tests/workers/conftest.py)


def critic_config(model_dir: str, *extra: str):
    """``configs/ppo_trainer.yaml``'s ``critic`` for the tiny model with LoRA rank 8 on every linear layer."""
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.train_batch_size=4",
        f"critic.model.path={model_dir}",
        "critic.model.enable_gradient_checkpointing=False",
        "critic.model.lora_rank=8",
        "critic.model.lora_alpha=16",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "critic.forward_micro_batch_size_per_gpu=2",
        "critic.optim.lr=1e-2",
        *extra,
    ]
    return compose_config("ppo_trainer", overrides).critic


def batch(seed: int = 0, size: int = 4) -> DataProto:
    """:func:`ppo_batch` (prompts [B, 6] + responses [B, 5]) with returns a fixed random target in [-1, 1]."""
    data = ppo_batch(size, seed)
    targets = torch.rand(size, R, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    data.batch["returns"] = targets * data.batch["response_mask"]
    return data


def make_worker(model_dir: str, *extra: str):
    from hybridrl.workers.fsdp_workers import CriticWorker

    worker = CriticWorker(critic_config(model_dir, *extra))
    worker.init_model()
    return worker


def values_of(worker, data: DataProto) -> torch.Tensor:
    """``values [B, R]`` of the worker (0 outside the response)."""
    return worker.compute_values(data).batch["values"]


def update(worker, data: DataProto) -> float:
    """One PPO critic update with ``values`` = the critic's current values (as the trainer passes them)."""
    data.batch["values"] = values_of(worker, data)
    metrics = worker.update_critic(data).meta_info["metrics"]
    losses = metrics["critic/vf_loss"]
    return float(sum(losses) / len(losses))


def full_state(worker) -> dict[str, torch.Tensor]:
    from hybridrl.workers.engine import get_full_state_dict

    return {name: value.clone() for name, value in get_full_state_dict(worker.critic_module).items()}


def plain_values(module, data: DataProto) -> torch.Tensor:
    """Values ``[B, R]`` of a plain (unwrapped) HF / peft value model through the same dp critic code."""
    from hybridrl.workers.critic import DataParallelPPOCritic

    config = compose_section("critic")
    data = DataProto.from_dict(tensors=dict(data.batch.items()), meta_info={"micro_batch_size": 2})
    return DataParallelPPOCritic(config, module.eval(), None).compute_values(data)


def is_trainable_name(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name or HEAD_COPY in name


@pytest.fixture(scope="module")
def lora_critic(tiny_model_dir):
    return make_worker(tiny_model_dir)


def test_only_adapters_and_value_head_train(lora_critic, tiny_model_dir):
    from hybridrl.workers.engine import load_hf_model

    worker = lora_critic
    named = dict(worker.critic_module.named_parameters())
    trainable = {name for name, p in named.items() if p.requires_grad}
    assert trainable and all(is_trainable_name(n) for n in trainable)
    assert {n for n in trainable if HEAD_COPY in n} == {HEAD_COPY + "weight", HEAD_COPY + "bias"}
    assert len({n for n in trainable if ".lora_A." in n}) == 2 * 7  # 2 layers × q,k,v,o,gate,up,down
    optimised = {id(p) for group in worker.critic_optimizer.param_groups for p in group["params"]}
    assert optimised == {id(named[n]) for n in trainable}
    # lora_B = 0 and the head copy = the seeded fresh head: the LoRA critic starts as the base value model
    base, _ = load_hf_model(tiny_model_dir, kind="token_classification", torch_dtype=torch.float32)
    torch.testing.assert_close(values_of(worker, batch(3)), plain_values(base, batch(3)), rtol=1e-5, atol=1e-6)

    before = full_state(worker)
    update(worker, batch(1))
    update(worker, batch(2))
    after = full_state(worker)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all(is_trainable_name(n) for n in changed)
    assert any(".lora_B." in n for n in changed)
    assert {HEAD_COPY + "weight", HEAD_COPY + "bias"} <= changed  # the value head learns
    frozen = set(before) - {n for n in before if is_trainable_name(n)}
    assert "base_model.model.score.original_module.weight" in frozen and any(".base_layer." in n for n in frozen)
    assert all(torch.equal(before[n], after[n]) for n in frozen)  # base weights bitwise unchanged


def test_critic_learns_fixed_batch(tiny_model_dir):
    torch.manual_seed(0)  # the value head's and LoRA's initialisation: independent of the tests run before
    worker = make_worker(tiny_model_dir)
    data = batch(5)
    losses = [update(worker, data) for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses
    mask = data.batch["response_mask"].bool()
    error = (values_of(worker, data) - data.batch["returns"])[mask].pow(2).mean()
    assert float(error) < 0.5 * 2 * losses[0], (float(error), losses)  # vf_loss = ½ · mean squared error


def test_checkpoint_roundtrip_adapter_and_merger(lora_critic, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForTokenClassification

    from hybridrl.model_merger import main as merger_main

    worker = lora_critic
    update(worker, batch(6))
    probe = batch(9)
    saved = values_of(worker, probe)
    ckpt = str(tmp_path / "global_step_2" / "critic")
    worker.save_checkpoint(ckpt, global_step=2)
    adapter_dir = os.path.join(ckpt, "lora_adapter")
    assert os.path.exists(os.path.join(adapter_dir, "adapter_model.safetensors"))

    # model + optimizer + lr schedule: the update after loading is the update after saving, bit for bit
    update(worker, batch(7))
    after_save = values_of(worker, probe)
    assert (after_save - saved).abs().max() > 1e-5
    update(worker, batch(8))
    worker.load_checkpoint(ckpt, del_local_after_load=False)
    torch.testing.assert_close(values_of(worker, probe), saved, rtol=0, atol=0)
    update(worker, batch(7))
    torch.testing.assert_close(values_of(worker, probe), after_save, rtol=0, atol=0)

    # lora_adapter/ alone (adapters + value head) on the base model is the trained critic
    base = AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, adapter_dir)
    torch.testing.assert_close(plain_values(peft_model, probe), saved, rtol=1e-5, atol=1e-5)

    # merger CLI: a plain token-classification folder, adapters merged, head = the trained copy
    target = str(tmp_path / "merged")
    merger_main(["merge", "--backend", "fsdp", "--local_dir", ckpt, "--target_dir", target])
    merged = AutoModelForTokenClassification.from_pretrained(target, dtype=torch.float32)
    assert merged.config.num_labels == 1
    names = set(merged.state_dict())
    assert "score.weight" in names and not any(
        "lora_" in n or "base_layer" in n or "modules_to_save" in n for n in names
    )
    torch.testing.assert_close(plain_values(merged, probe), saved, rtol=1e-5, atol=1e-5)


def test_fsdp1_lora_refused_with_the_key_to_set(tiny_model_dir):
    with pytest.raises(ValueError, match=r"critic\.strategy=fsdp2"):
        make_worker(tiny_model_dir, "critic.strategy=fsdp")


@pytest.mark.parametrize(
    ("targets", "exclude", "expected_lora"),
    [
        (["q_proj", "v_proj"], None, 2 * 2),  # 2 layers × q, v
        ("all-linear", r".*layers\.0\..*", 1 * 7),  # regex exclude: layer 1 only
        ("all-linear", ["o_proj"], 2 * 6),
    ],
)
def test_value_head_trains_in_full_whatever_the_targets(tiny_model_dir, targets, exclude, expected_lora):
    """The head is never a LoRA layer and always trains (verl 0.5 leaves it frozen when targets omit it)."""
    from hybridrl.workers.engine import load_hf_model
    from hybridrl.workers.engine.lora import apply_value_lora, lora_scalings

    module, _ = load_hf_model(tiny_model_dir, kind="token_classification", torch_dtype=torch.float32)
    config = OmegaConf.create(  # critic.model has no exclude_modules in the YAML: a literal section
        {"lora_rank": 4, "lora_alpha": 8, "target_modules": targets, "exclude_modules": exclude,
         "enable_gradient_checkpointing": False}
    )
    peft_model = apply_value_lora(module, config)
    scalings = lora_scalings(peft_model)
    assert len(scalings) == expected_lora and not any("score" in path for path in scalings)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert {HEAD_COPY + "weight", HEAD_COPY + "bias"} <= trainable
    assert all(is_trainable_name(n) for n in trainable)


def test_value_lora_needs_a_value_head(tiny_model_dir):
    from hybridrl.workers.engine import load_hf_model
    from hybridrl.workers.engine.lora import apply_value_lora

    causal_lm, _ = load_hf_model(tiny_model_dir, kind="causal_lm", torch_dtype=torch.float32)
    with pytest.raises(ValueError, match="ForTokenClassification"):
        apply_value_lora(causal_lm, compose_section("critic.model", lora_rank=4))


def test_lora_critic_with_checkpointing_and_packing(tiny_model_dir):
    """Gradient checkpointing (frozen embeddings need input grads) + packed sequences: same values, same contract."""
    worker = make_worker(
        tiny_model_dir, "critic.model.enable_gradient_checkpointing=True", "critic.model.use_remove_padding=True"
    )
    padded = make_worker(tiny_model_dir)
    data = batch(4)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(values_of(worker, data)[mask], values_of(padded, data)[mask], rtol=1e-5, atol=1e-5)
    before = full_state(worker)
    losses = [update(worker, data) for _ in range(3)]
    after = full_state(worker)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert any(".lora_A." in n for n in changed) and HEAD_COPY + "weight" in changed
    assert all(is_trainable_name(n) for n in changed)
    assert losses[-1] < losses[0], losses
