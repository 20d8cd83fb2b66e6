"""The DAPO manager's checks of the overlong buffer (verl 0.9): what it demands only when the buffer is on."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from hybridrl.workers.reward_manager import DAPORewardManager
from hybridrl.workers.reward_manager.dapo import overlong_penalty


def build(max_resp_len, **buffer):
    cfg = None if buffer.get("enable") is None else {"len": 4, "penalty_factor": 1.0, "log": False, **buffer}
    return DAPORewardManager(
        None, 0, compute_score=lambda **kw: 1.0, max_resp_len=max_resp_len, overlong_buffer_cfg=cfg
    )


def test_max_resp_len_not_demanded_without_an_enabled_buffer():
    assert build(None).overlong_buffer_cfg is None  # no buffer at all
    assert build(None, enable=False).max_resp_len is None  # buffer off (verl 0.5 refused this)


def test_enabled_buffer_needs_max_resp_len():
    with pytest.raises(ValueError, match=r"max_resp_len must be provided.*reward_model\.reward_kwargs\.max_resp_len"):
        build(None, enable=True)


def test_max_resp_len_shorter_than_the_buffer_is_rejected():
    with pytest.raises(ValueError, match=r"must be larger than overlong_buffer\.len .*max_resp_len=3 < len=4.*\.len"):
        build(3, enable=True, len=4)
    # equal is accepted (verl 0.9 asserts max_resp_len >= len): the penalty starts at the first token
    manager = build(4, enable=True, len=4)
    # L_max = B = 4 → expected_len 0: L = 2 → −(2 − 0)/4 = −0.5
    assert overlong_penalty(2, manager.max_resp_len, 4, 1.0) == pytest.approx(-0.5)


@pytest.mark.parametrize("buffer_len", [0, -2])
def test_enabled_buffer_needs_a_positive_length(buffer_len):
    with pytest.raises(ValueError, match=r"must be positive.*enable=False"):
        build(8, enable=True, len=buffer_len)


def test_checks_read_omegaconf_sections_as_the_trainer_passes_them():
    cfg = OmegaConf.create({"enable": True, "len": 16, "penalty_factor": 1.0, "log": False})
    # verl 0.9 raises AssertionError here: the error is both, so code catching verl's keeps working
    with pytest.raises(AssertionError, match="must be larger"):
        DAPORewardManager(None, 0, max_resp_len=8, overlong_buffer_cfg=cfg)
