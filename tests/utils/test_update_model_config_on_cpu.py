"""``update_model_config`` (verl's ``model.override_config``) leaves only plain values on the HF config."""

from __future__ import annotations

from omegaconf import OmegaConf
from transformers import PretrainedConfig

from hybridrl.utils.model import update_model_config


def test_nested_yaml_overrides_become_plain_and_serialisable():
    config = PretrainedConfig()
    # ppo_megatron_trainer.yaml's critic.model.override_config, as a worker receives it (an OmegaConf node)
    update_model_config(config, OmegaConf.create({"moe_config": {"freeze_moe_router": False}, "ids": [1, {"a": 2}]}))
    assert type(config.moe_config) is dict and config.moe_config == {"freeze_moe_router": False}
    assert config.ids == [1, {"a": 2}] and type(config.ids[1]) is dict
    assert '"freeze_moe_router": false' in config.to_json_string()  # save_pretrained writes this JSON
