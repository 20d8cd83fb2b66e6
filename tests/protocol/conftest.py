"""Fixtures shared by the DataProto tests."""

from __future__ import annotations

import pytest

from hybridrl.protocol import DataProtoConfig


@pytest.fixture
def no_global_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Auto padding off for the test: no env switch, no process-wide ``DataProtoConfig.auto_padding``."""
    for env in ("VERL_AUTO_PADDING", "HYBRIDRL_AUTO_PADDING"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(DataProtoConfig, "_config", {})
