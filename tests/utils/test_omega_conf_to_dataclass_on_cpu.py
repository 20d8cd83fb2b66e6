"""``hybridrl.utils.config.omega_conf_to_dataclass``: a section to a config dataclass, with the class given or
named by ``_target_`` (nested ``_target_`` sections built first), as in verl."""

from dataclasses import dataclass, field

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from hybridrl.base_config import BaseConfig
from hybridrl.utils import omega_conf_to_dataclass
from hybridrl.workers.config import FSDPActorConfig, FSDPOptimizerConfig, McoreActorConfig, McoreOptimizerConfig


@dataclass
class Layer(BaseConfig):
    width: int = 0
    activation: str = "relu"


@dataclass
class Network(BaseConfig):
    depth: int = 0
    layer: Layer = field(default_factory=Layer)
    extras: dict = field(default_factory=dict)


def test_class_given_merges_onto_its_defaults():
    network = omega_conf_to_dataclass(OmegaConf.create({"depth": 3, "layer": {"width": 8}}), Network)
    assert network == Network(depth=3, layer=Layer(width=8, activation="relu"))
    assert isinstance(network.layer, Layer)
    assert omega_conf_to_dataclass({"width": 2}, Layer) == Layer(width=2)  # a plain dict too


def test_empty_section_and_built_objects():
    assert omega_conf_to_dataclass({}, Layer) == Layer()
    assert omega_conf_to_dataclass({}) is None
    layer = Layer(width=1)
    assert omega_conf_to_dataclass(layer, Layer) is layer  # already built: returned as it is


def test_target_names_the_classes_nested_first():
    section = {
        "_target_": "hybridrl.workers.config.McoreActorConfig",
        "ppo_micro_batch_size_per_gpu": 4,
        "clip_ratio": 0.3,
        "optim": {"_target_": "hybridrl.workers.config.McoreOptimizerConfig", "lr": 0.1},
    }
    with pytest.warns(UserWarning, match="TP size is 1"):
        actor = omega_conf_to_dataclass(section)
    assert type(actor) is McoreActorConfig and actor.clip_ratio == 0.3
    assert type(actor.optim) is McoreOptimizerConfig and actor.optim.lr == 0.1
    fsdp = omega_conf_to_dataclass(
        {
            **section,
            "_target_": "hybridrl.workers.config.FSDPActorConfig",
            "optim": {"_target_": "hybridrl.workers.config.FSDPOptimizerConfig", "lr": 0.2},
        }
    )
    assert type(fsdp) is FSDPActorConfig and type(fsdp.optim) is FSDPOptimizerConfig


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="_target_"):
        omega_conf_to_dataclass({"width": 1})
    with pytest.raises(ValueError, match="must be a dataclass"):
        omega_conf_to_dataclass({"width": 1}, dict)
    with pytest.raises(ConfigKeyError, match="height"):
        omega_conf_to_dataclass({"height": 1}, Layer)


def test_targets_into_verl_build_the_hybridrl_class():
    """verl's YAML and saved configs name ``verl.workers.config.*``; the same path under hybridrl is built."""
    section = OmegaConf.create(
        {
            "_target_": "verl.workers.config.FSDPActorConfig",
            "ppo_micro_batch_size_per_gpu": 2,
            "optim": {"_target_": "verl.workers.config.FSDPOptimizerConfig", "lr": 0.5},
        }
    )
    actor = omega_conf_to_dataclass(section)
    assert type(actor) is FSDPActorConfig and type(actor.optim) is FSDPOptimizerConfig and actor.optim.lr == 0.5
