"""FSDPCheckpointManager on one gloo rank: verl 0.5 layout, bitwise save → load, atomicity, rotation, HF export."""

import json
import os
import random

import numpy as np
import pytest
import torch
from config_testlib import compose_section
from engine_testlib import build_training_setup, single_rank_group, token_batch, train_step

from hybridrl.utils.checkpoint import find_latest_ckpt_path, write_checkpoint_tracker
from hybridrl.workers.engine import FSDPCheckpointManager, get_full_state_dict
from hybridrl.workers.engine.state_dict import get_sharded_optimizer_state_dict

CONTENTS = compose_section("actor_rollout_ref.actor.checkpoint")  # model, optimizer, extra (load = save)


@pytest.fixture(scope="module", autouse=True)
def gloo_group():
    with single_rank_group():
        yield


def _manager(setup, config=CONTENTS):
    module, optimizer, scheduler, tokenizer = setup
    return FSDPCheckpointManager(module, optimizer, scheduler, tokenizer, checkpoint_config=config)


def _rng_draws():
    return (random.random(), float(np.random.rand()), torch.rand(2))


def _optimizer_tensors(module, optimizer):
    state = get_sharded_optimizer_state_dict(module, optimizer)["state"]
    return {
        f"{name}.{key}": value.to_local() if hasattr(value, "to_local") else value
        for name, entry in state.items()
        for key, value in entry.items()
    }


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_save_load_restores_model_optimizer_scheduler_rng_bitwise(tiny_model_dir, tmp_path, strategy):
    setup = build_training_setup(tiny_model_dir, strategy)
    module, optimizer, scheduler, _ = setup
    for seed in range(3):
        train_step(module, optimizer, scheduler, token_batch(seed))
    path = str(tmp_path / "global_step_3" / "actor")
    _manager(setup).save_checkpoint(path, global_step=3)
    expected_rng = _rng_draws()
    expected_loss = train_step(module, optimizer, scheduler, token_batch(3))  # continuation of the original run
    expected_model, expected_optim = get_full_state_dict(module), _optimizer_tensors(module, optimizer)
    expected_lr = scheduler.get_last_lr()

    fresh = build_training_setup(tiny_model_dir, strategy)
    random.seed(123), np.random.seed(123), torch.manual_seed(123)  # move every RNG away from the saved state
    _manager(fresh).load_checkpoint(path)
    assert fresh[2].last_epoch == 3
    actual_rng = _rng_draws()  # python, numpy, torch RNG restored
    assert actual_rng[:2] == expected_rng[:2] and torch.equal(actual_rng[2], expected_rng[2])
    loss = train_step(fresh[0], fresh[1], fresh[2], token_batch(3))
    assert loss == expected_loss
    assert fresh[2].get_last_lr() == expected_lr
    actual_model, actual_optim = get_full_state_dict(fresh[0]), _optimizer_tensors(fresh[0], fresh[1])
    assert all(torch.equal(actual_model[k], expected_model[k]) for k in expected_model)
    assert set(actual_optim) == set(expected_optim)
    assert all(torch.equal(actual_optim[k], expected_optim[k]) for k in expected_optim)


def test_layout_matches_verl_and_every_file_loads_weights_only(tiny_model_dir, tmp_path):
    setup = build_training_setup(tiny_model_dir)
    train_step(setup[0], setup[1], setup[2], token_batch(0))
    path = tmp_path / "global_step_1" / "actor"
    _manager(setup).save_checkpoint(str(path), global_step=1)
    names = set(os.listdir(path))
    for kind in ("model", "optim", "extra_state"):
        assert f"{kind}_world_size_1_rank_0.pt" in names
        torch.load(path / f"{kind}_world_size_1_rank_0.pt", weights_only=True)
    assert json.loads((path / "fsdp_config.json").read_text()) == {"FSDP_version": 2, "world_size": 1}
    hf_files = set(os.listdir(path / "huggingface"))
    assert {"config.json", "generation_config.json", "tokenizer.json"} <= hf_files
    assert "model.safetensors" not in hf_files  # hf_model not in save_contents
    assert json.loads((path / "huggingface" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    extra = torch.load(path / "extra_state_world_size_1_rank_0.pt", weights_only=True)
    assert set(extra) == {"lr_scheduler", "rng", "num_skipped_steps"}
    assert set(extra["rng"]) >= {"cpu", "numpy", "random"}


def test_hf_model_content_writes_loadable_weights(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    setup = build_training_setup(tiny_model_dir)
    train_step(setup[0], setup[1], setup[2], token_batch(0))
    path = tmp_path / "global_step_1" / "actor"
    config = compose_section("actor_rollout_ref.actor.checkpoint", save_contents=["model", "hf_model"], load_contents=["model"])
    _manager(setup, config).save_checkpoint(str(path), global_step=1)
    reloaded = AutoModelForCausalLM.from_pretrained(path / "huggingface")
    ids = token_batch(5)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, setup[0](input_ids=ids).logits, rtol=0, atol=1e-6)


def test_interrupted_save_is_never_resumed_from(tiny_model_dir, tmp_path, monkeypatch):
    setup = build_training_setup(tiny_model_dir)
    manager = _manager(setup)
    manager.save_checkpoint(str(tmp_path / "global_step_1" / "actor"), global_step=1)
    write_checkpoint_tracker(str(tmp_path), 1)

    def crash(*_args, **_kwargs):
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(manager, "_save_shared_files", crash)
    with pytest.raises(KeyboardInterrupt):
        manager.save_checkpoint(str(tmp_path / "global_step_2" / "actor"), global_step=2)
    write_checkpoint_tracker(str(tmp_path), 2)  # even if the tracker were advanced
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_1")
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        manager.load_checkpoint(str(tmp_path / "global_step_2" / "actor"))
    # re-saving step 1 over itself after a crash there also stays partial until done
    monkeypatch.setattr(manager, "_save_shared_files", crash)
    with pytest.raises(KeyboardInterrupt):
        manager.save_checkpoint(str(tmp_path / "global_step_1" / "actor"), global_step=1)
    assert find_latest_ckpt_path(str(tmp_path)) is None


def test_rotation_keeps_max_ckpt_to_keep(tiny_model_dir, tmp_path):
    setup = build_training_setup(tiny_model_dir)
    manager = _manager(setup)
    for step in (1, 2, 3):
        manager.save_checkpoint(str(tmp_path / f"global_step_{step}" / "actor"), global_step=step, max_ckpt_to_keep=2)
    assert sorted(os.listdir(tmp_path)) == ["global_step_2", "global_step_3"]


def test_world_size_mismatch_and_delete_after_load(tiny_model_dir, tmp_path):
    setup = build_training_setup(tiny_model_dir)
    manager = _manager(setup)
    path = tmp_path / "global_step_1" / "actor"
    manager.save_checkpoint(str(path), global_step=1)
    (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
    with pytest.raises(ValueError, match="world size 2"):
        manager.load_checkpoint(str(path))
    (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    manager.load_checkpoint(str(path), del_local_after_load=True)
    assert not any(name.endswith("_rank_0.pt") for name in os.listdir(path))
