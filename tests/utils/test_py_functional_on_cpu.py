"""hybridrl.utils.py_functional: verl 0.5's timeout decorator and small helpers."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time

import pytest
from omegaconf import OmegaConf

from hybridrl.single_controller.base.decorator import Dispatch
from hybridrl.utils.py_functional import (
    DynamicEnum,
    NestedNamespace,
    append_to_dict,
    convert_to_regular_types,
    temp_env_var,
    timeout_limit,
    union_two_dict,
)

LIMIT_S = 0.5
TOO_LONG_S = 3.0  # the child is terminated at LIMIT_S, so the test does not wait for this


@timeout_limit(seconds=LIMIT_S)
def quick(x):
    return x * 2


@timeout_limit(seconds=LIMIT_S)
def slow():
    time.sleep(TOO_LONG_S)
    return "finished"


@timeout_limit(seconds=LIMIT_S)
def slow_and_deaf_to_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a forked child stuck before its Python handler can run
    time.sleep(TOO_LONG_S)
    return "finished"


@timeout_limit(seconds=LIMIT_S)
def raises():
    raise ValueError("from the task")


def test_timeout_returns_the_result_of_a_quick_call():
    assert quick(21) == 42


def test_timeout_raises_for_a_slow_call_and_names_the_limit():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=f"timed out after {LIMIT_S} seconds"):
        slow()
    assert time.monotonic() - start < TOO_LONG_S  # the child was stopped, not waited for


def test_a_child_that_survives_sigterm_is_killed_not_left_behind():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=f"timed out after {LIMIT_S} seconds"):
        slow_and_deaf_to_sigterm()
    assert time.monotonic() - start < TOO_LONG_S
    assert multiprocessing.active_children() == []  # nothing left for the interpreter's exit to wait on


def test_timeout_reraises_the_exception_of_the_call():
    with pytest.raises(ValueError, match="^from the task$"):
        raises()


def test_timeout_works_from_a_thread():
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(TimeoutError, slow)))
    thread.start()
    thread.join(timeout=TOO_LONG_S + 2)
    assert len(errors) == 1


def test_signal_timeout_in_the_main_thread():
    @timeout_limit(seconds=LIMIT_S, use_signals=True)
    def sleeper(seconds):
        time.sleep(seconds)
        return "done"

    assert sleeper(0.01) == "done"
    with pytest.raises(TimeoutError, match=f"timed out after {LIMIT_S} seconds"):
        sleeper(TOO_LONG_S)


def test_append_to_dict_and_union_two_dict():
    metrics: dict = {}
    append_to_dict(metrics, {"a": 1})
    append_to_dict(metrics, {"a": 2, "b": 3})
    assert metrics == {"a": [1, 2], "b": [3]}
    merged = union_two_dict({"x": 1}, {"x": 1, "y": 2})
    assert merged == {"x": 1, "y": 2}
    with pytest.raises(AssertionError):
        union_two_dict({"x": 1}, {"x": 2})


def test_nested_namespace_and_regular_types():
    ns = NestedNamespace({"a": 1, "b": {"c": 2, "d": {"e": 3}}})
    assert (ns.a, ns.b.c, ns.b.d.e) == (1, 2, 3)
    cfg = OmegaConf.create({"a": {"b": [1, 2]}, "c": (3, 4)})
    plain = convert_to_regular_types(cfg)
    assert plain == {"a": {"b": [1, 2]}, "c": [3, 4]} and type(plain["a"]) is dict and type(plain["a"]["b"]) is list
    assert convert_to_regular_types((1, {"k": OmegaConf.create([5])})) == [1, {"k": [5]}]


def test_temp_env_var_restores_or_removes(monkeypatch):
    monkeypatch.setenv("HYBRIDRL_TEST_SET", "old")
    monkeypatch.delenv("HYBRIDRL_TEST_UNSET", raising=False)
    with temp_env_var("HYBRIDRL_TEST_SET", "new"), temp_env_var("HYBRIDRL_TEST_UNSET", "x"):
        assert os.environ["HYBRIDRL_TEST_SET"] == "new" and os.environ["HYBRIDRL_TEST_UNSET"] == "x"
    assert os.environ["HYBRIDRL_TEST_SET"] == "old" and "HYBRIDRL_TEST_UNSET" not in os.environ
    with pytest.raises(RuntimeError), temp_env_var("HYBRIDRL_TEST_SET", "during-error"):
        raise RuntimeError
    assert os.environ["HYBRIDRL_TEST_SET"] == "old"


class Color(DynamicEnum):
    pass


def test_dynamic_enum_registers_upper_case_names_and_pickles_by_name():
    red = Color.register("red")
    assert red is Color.RED and Color["RED"] is red and Color.from_name("red") is red
    assert "RED" in Color and red in Color and Color.names() == ["RED"] and Color.values() == [red]
    with pytest.raises(ValueError, match="RED already registered"):
        Color.register("Red")
    assert pickle.loads(pickle.dumps(red)) is red
    assert Color.remove("red") is red and "RED" not in Color
    assert Dispatch.from_name("dp_compute_proto") is Dispatch.DP_COMPUTE_PROTO  # the decorator's enums are these
