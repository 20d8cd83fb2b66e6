"""LoRA helpers without torch.distributed: peft wrapping, name mapping, merge arithmetic, adapter files."""

from __future__ import annotations

import json

import pytest
import torch
from config_testlib import compose_section
from omegaconf import OmegaConf

from hybridrl.workers.engine import lora

LORA_CONFIG = {"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear", "exclude_modules": None}


def _tiny(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def test_lora_enabled_reads_rank():
    assert lora.lora_enabled(compose_section("actor_rollout_ref.model", lora_rank=8))
    assert not lora.lora_enabled(compose_section("actor_rollout_ref.model"))
    assert not lora.lora_enabled(OmegaConf.create({}))
    with pytest.raises(ValueError, match="lora_rank must be > 0"):
        lora.apply_lora(torch.nn.Linear(2, 2), compose_section("actor_rollout_ref.model"))


def test_base_name_strips_peft_and_wrapper_prefixes():
    assert lora.base_name("base_model.model.model.layers.0.mlp.up_proj.base_layer.weight") == (
        "model.layers.0.mlp.up_proj.weight"
    )
    assert lora.base_name("_fsdp_wrapped_module.base_model.model.lm_head.weight") == "lm_head.weight"
    assert lora.is_lora_key("base_model.model.x.lora_A.default.weight")
    assert not lora.is_lora_key("base_model.model.x.base_layer.weight")


def test_merge_arithmetic_by_hand():
    # W = [[1, 0], [0, 1]], A = [[1, 2]] (r=1, in=2), B = [[3], [4]] (out=2, r=1), scaling 0.5
    # B @ A = [[3, 6], [4, 8]]  →  W + 0.5·B@A = [[2.5, 3], [2, 5]]
    stream = [
        ("base_model.model.emb.weight", torch.ones(3)),
        ("base_model.model.fc.base_layer.weight", torch.eye(2)),
        ("base_model.model.fc.base_layer.bias", torch.tensor([7.0, 8.0])),
        ("base_model.model.fc.lora_A.default.weight", torch.tensor([[1.0, 2.0]])),
        ("base_model.model.fc.lora_B.default.weight", torch.tensor([[3.0], [4.0]])),
    ]
    merged = dict(lora.merge_lora_tensors(stream, {"base_model.model.fc": 0.5}))
    assert sorted(merged) == ["emb.weight", "fc.bias", "fc.weight"]
    torch.testing.assert_close(merged["fc.weight"], torch.tensor([[2.5, 3.0], [2.0, 5.0]]))
    torch.testing.assert_close(merged["fc.bias"], torch.tensor([7.0, 8.0]))
    # the same with one global scaling float
    torch.testing.assert_close(lora.merged_state_dict(dict(stream), 0.5)["fc.weight"], merged["fc.weight"])


def test_merge_refuses_incomplete_layers_and_unknown_adapters():
    with pytest.raises(ValueError, match="incomplete LoRA layers"):
        dict(lora.merge_lora_tensors([("m.fc.base_layer.weight", torch.eye(2))], 1.0))
    with pytest.raises(NotImplementedError, match="lora_embedding_A"):
        dict(lora.merge_lora_tensors([("m.emb.lora_embedding_A.default", torch.eye(2))], 1.0))


def test_apply_lora_trains_adapters_only_and_starts_as_base(tiny_model_dir):
    base = _tiny(tiny_model_dir)
    model = lora.apply_lora(_tiny(tiny_model_dir), compose_section("actor_rollout_ref.model", **LORA_CONFIG))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert lora.unwrap_peft(model) is model and lora.unwrap_peft(base) is None
    assert set(lora.lora_scalings(model).values()) == {2.0}  # alpha 8 / r 4
    ids = torch.randint(5, 500, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = base(ids).logits
        torch.testing.assert_close(model(ids).logits, expected)  # lora_B = 0 at init
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(generator=torch.Generator().manual_seed(1))
        adapted = model(ids).logits
        assert (adapted - expected).abs().max() > 1e-2
        with lora.disable_adapter(model):
            torch.testing.assert_close(model(ids).logits, expected)
        # merged weights under base names reproduce the adapted model
        merged = lora.merged_state_dict(model.state_dict(), lora.lora_scalings(model))
        assert set(merged) == set(base.state_dict())
        base.load_state_dict(merged)
        torch.testing.assert_close(base(ids).logits, adapted, rtol=1e-5, atol=1e-5)


def test_exclude_modules_and_adapter_files(tiny_model_dir, tmp_path):
    from peft import PeftModel

    config = compose_section("actor_rollout_ref.model", **{**LORA_CONFIG, "exclude_modules": ["o_proj"], "lora_alpha": 4})
    model = lora.apply_lora(_tiny(tiny_model_dir), config)
    names = [name for name, _ in model.named_parameters() if "lora_A" in name]
    assert names and not any("o_proj" in n for n in names) and any("q_proj" in n for n in names)
    adapter = lora.lora_adapter_state_dict(model.state_dict().items())
    assert all(".default." not in name for name in adapter) and len(adapter) == 2 * len(names)
    folder = lora.save_lora_adapter(model, adapter, str(tmp_path / lora.ADAPTER_SUBDIR))
    assert lora.read_adapter_scaling(folder) == 1.0  # alpha 4 / r 4
    assert json.loads((tmp_path / lora.ADAPTER_SUBDIR / "adapter_config.json").read_text())["r"] == 4
    reloaded = PeftModel.from_pretrained(_tiny(tiny_model_dir), folder)
    for name, value in adapter.items():
        torch.testing.assert_close(reloaded.state_dict()[name.replace(".weight", ".default.weight")], value)
    with pytest.raises(FileNotFoundError, match="lora_adapter"):
        lora.read_adapter_scaling(str(tmp_path / "missing"))
