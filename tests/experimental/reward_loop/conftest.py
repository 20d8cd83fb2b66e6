"""Reward-loop tests: ``async def`` tests marked ``asyncio`` run in a fresh event loop (a stand-in for the
pytest-asyncio plugin verl's tests use, which the test environment does not install), a tokenizer, and the
reward-manager tests' batch builder."""

import asyncio
import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers" / "reward_manager"))  # rm_testlib


def pytest_configure(config):
    config.addinivalue_line("markers", "asyncio: an async def test, run by asyncio.run (pytest-asyncio's marker)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
