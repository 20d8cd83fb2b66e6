"""``hybridrl.base_config``: verl's dict-like, mostly frozen ``BaseConfig``, and ``yaml_dataclass``, which reads a
config class's defaults from the shipped YAML so that no default is written twice."""

from dataclasses import FrozenInstanceError, dataclass, fields

import pytest

from hybridrl import base_config
from hybridrl.base_config import BaseConfig, build_nested, field_defaults, yaml_dataclass, yaml_section


@dataclass
class _Point(BaseConfig):
    _mutable_fields = frozenset({"y"})

    x: int = 1
    y: int = 2


def test_mapping_interface():
    point = _Point(x=3)
    assert point["x"] == 3 and point.get("y") == 2
    assert point.get("z") is None and point.get("z", "fallback") == "fallback"
    assert list(point) == ["_target_", "x", "y"] and len(point) == 3
    assert dict(point.items()) == {"_target_": "", "x": 3, "y": 2}


def test_fields_are_frozen_unless_listed_mutable():
    point = _Point()
    with pytest.raises(FrozenInstanceError, match="'x' is frozen"):
        point.x = 5
    assert isinstance(FrozenInstanceError(), AttributeError)  # verl's tests catch AttributeError
    point.y = 7  # listed in _mutable_fields
    assert point.y == 7


@pytest.fixture
def fake_yaml(monkeypatch):
    """A resolved ``ppo_trainer`` tree of our own, so the test controls the YAML values."""
    tree = {"section": {"lr": 0.5, "betas": [0.1, 0.2], "inner": {"depth": 3}, "extra": "kept"}}
    monkeypatch.setattr(base_config, "_resolved_tree", lambda name: tree)
    return tree


def test_yaml_dataclass_takes_defaults_from_the_yaml(fake_yaml):
    @yaml_dataclass("section.inner")
    class Inner(BaseConfig):
        depth: int

    @yaml_dataclass("section")
    class Section(BaseConfig):
        lr: float = 1e-3  # the YAML has lr: the class-body value must not win
        betas: list[float]
        inner: Inner
        not_in_yaml: str = "fallback"

    section = Section()
    assert section.lr == 0.5 and section.betas == [0.1, 0.2] and section.inner == Inner(depth=3)
    assert section.not_in_yaml == "fallback"
    assert Section._yaml_fields == {"lr", "betas", "inner"} and Section._yaml_source == ("ppo_trainer", "section")
    assert "extra" not in {f.name for f in fields(Section)}  # extra_keys=False: undeclared keys stay out
    assert Section().betas is not Section().betas  # a fresh list per instance
    assert Section(lr=2.0).lr == 2.0


def test_extra_keys_and_inherited_fields(fake_yaml):
    @yaml_dataclass("section.inner")
    class Base(BaseConfig):
        lr: float = 9.0  # not in section.inner: the fallback

    @yaml_dataclass("section", extra_keys=True)
    class Leaf(Base):
        pass

    leaf = Leaf()
    assert Base().lr == 9.0 and leaf.lr == 0.5  # the subclass re-reads the inherited field from its own path
    assert leaf.extra == "kept" and leaf.inner == {"depth": 3} and leaf.betas == [0.1, 0.2]


def test_a_field_with_no_default_anywhere_is_required(fake_yaml):
    @yaml_dataclass("section")
    class Needs(BaseConfig):
        missing: int

    with pytest.raises(TypeError, match="missing"):
        Needs()
    assert field_defaults(Needs)["missing"] is base_config.MISSING


def test_build_nested_keeps_the_fields_of_the_class():
    assert build_nested(_Point, {"x": 4, "z": 2}) == _Point(x=4)  # z: a key of a subclass's section


def test_yaml_section_reads_the_shipped_yaml():
    assert yaml_section("algorithm.kl_ctrl")["type"] in ("fixed", "adaptive")
    assert yaml_section("no.such.section") is None
