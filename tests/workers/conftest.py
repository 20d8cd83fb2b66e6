"""Fixtures of the worker tests."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from hybridrl.utils.ports import free_port


@pytest.fixture(scope="module")
def single_rank_env():
    """The rendezvous environment of a 1-rank gloo group (the worker under test joins it), torn down after the
    module. Use with ``pytestmark = pytest.mark.usefixtures("single_rank_env")``."""
    mp = pytest.MonkeyPatch()
    for key, value in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        mp.setenv(key, value)
    mp.setenv("MASTER_PORT", str(free_port()))
    mp.setenv("HYBRIDRL_DEVICE", "cpu")
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    mp.undo()
