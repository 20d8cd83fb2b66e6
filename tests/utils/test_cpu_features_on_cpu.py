"""CPU feature detection and the bf16-on-CPU warning (hand-written /proc/cpuinfo texts)."""

from __future__ import annotations

import warnings

import pytest

from hybridrl.config.checks_env import warn_bf16_without_cpu_support
from hybridrl.config.errors import ConfigWarning
from hybridrl.utils.cpu_features import has_native_bf16, parse_cpu_flags
from tests.config_testlib import compose_config

X86_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t: x\n"
X86_BF16 = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 avx512_vnni\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


def test_flags_are_read_from_the_first_processor_on_x86_and_arm():
    assert parse_cpu_flags(X86_AVX2) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert "bf16" in parse_cpu_flags(ARM_BF16)
    assert parse_cpu_flags("no flags here") == frozenset()


def test_native_bf16_needs_a_bf16_dot_product_flag():
    assert has_native_bf16(parse_cpu_flags(X86_AVX2)) is False
    assert has_native_bf16(parse_cpu_flags(X86_BF16)) is True
    assert has_native_bf16(parse_cpu_flags(ARM_BF16)) is True
    assert has_native_bf16(frozenset({"amx_bf16"})) is True


def _cpu_config(*overrides: str):
    return compose_config("ppo_trainer", ["trainer.device=cpu", *overrides])


def test_bf16_rollout_on_a_cpu_without_bf16_units_warns_with_the_fix(monkeypatch):
    monkeypatch.setattr("hybridrl.config.errors._warned", set())  # warn_once: another test may have warned
    config = _cpu_config("actor_rollout_ref.rollout.dtype=bfloat16")
    with pytest.warns(ConfigWarning, match=r"actor_rollout_ref\.rollout\.dtype=float32"):
        keys = warn_bf16_without_cpu_support(config, native_bf16=False)
    assert keys == ["actor_rollout_ref.rollout.dtype"]


def test_no_warning_with_bf16_units_unknown_cpu_or_fp32_compute():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_bf16_without_cpu_support(_cpu_config("actor_rollout_ref.rollout.dtype=bfloat16"), True) == []
        assert warn_bf16_without_cpu_support(_cpu_config("actor_rollout_ref.rollout.dtype=bfloat16"), None) == []
        assert warn_bf16_without_cpu_support(_cpu_config("actor_rollout_ref.rollout.dtype=float32"), False) == []
