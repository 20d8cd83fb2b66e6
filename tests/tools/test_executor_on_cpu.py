"""ToolExecutor: calls run off the caller's loop, time out, and turn errors into results; verl 0.5/0.9 shapes."""

import asyncio
import time

import pytest

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.executor import (
    DEFAULT_TOOL_TIMEOUT_S,
    ToolCallResult,
    ToolError,
    ToolExecutor,
    create_arguments,
)
from hybridrl.tools.schemas import ToolResponse


def schema(name):
    return {"type": "function", "function": {"name": name, "description": "test tool"}}


class SleepyTool(BaseTool):
    """Blocks its thread (time.sleep, not asyncio.sleep) for parameters["seconds"]."""

    async def execute(self, instance_id, parameters, **kwargs):
        time.sleep(parameters["seconds"])
        return ToolResponse(text=f"slept {parameters['seconds']}"), 0.5, {"slept": parameters["seconds"]}


class AsyncSleepyTool(BaseTool):
    cancelled = False

    async def execute(self, instance_id, parameters, **kwargs):
        try:
            await asyncio.sleep(parameters["seconds"])
        except asyncio.CancelledError:
            AsyncSleepyTool.cancelled = True
            raise
        return ToolResponse(text="done"), 0.0, {}


class RaisingTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        raise ValueError("bad input 7")


class OwnTimeoutTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        raise TimeoutError("upstream API timed out")


class Verl05Tool(BaseTool):
    """verl 0.5 shapes: create → str, execute → (str, float, dict); keyword create_kwargs."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        self.states, self.released = {}, []

    async def create(self, instance_id=None, ground_truth=None):
        self.states[instance_id or "generated"] = ground_truth
        return instance_id or "generated"

    async def execute(self, instance_id, parameters, **kwargs):
        return f"truth={self.states[instance_id]} got={parameters['answer']}", 1.0, {"calls": 1}

    async def calc_reward(self, instance_id, **kwargs):
        return 1 if self.states[instance_id] == "42" else 0

    async def release(self, instance_id, **kwargs):
        self.released.append(instance_id)


class Verl09Tool(BaseTool):
    """verl 0.9 shapes: create(create_kwargs=...) → (id, ToolResponse); execute → (ToolResponse, None, None)."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        self.seen = {}

    async def create(self, instance_id=None, **kwargs):
        instance_id = instance_id or "new"
        self.seen[instance_id] = kwargs
        return instance_id, ToolResponse(text="created")

    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(), None, None  # verl's SandboxFusionTool returns None reward and metrics


def run(coroutine):
    return asyncio.run(coroutine)


def test_slow_blocking_tool_does_not_delay_a_fast_one():
    executor = ToolExecutor()
    slow, fast = SleepyTool({}, schema("slow")), SleepyTool({}, schema("fast"))

    async def both():
        start = time.perf_counter()
        finished = {}

        async def timed(name, coroutine):
            result = await coroutine
            finished[name] = time.perf_counter() - start
            return result

        results = await asyncio.gather(
            timed("slow", executor.call(slow, "a", {"seconds": 1.5})),
            timed("fast", executor.call(fast, "b", {"seconds": 0.0})),
        )
        return results, finished

    (slow_result, fast_result), finished = run(both())
    assert slow_result == ToolCallResult("slept 1.5", 0.5, {"slept": 1.5}, None, slow_result.seconds)
    assert fast_result.text == "slept 0.0" and fast_result.error is None
    # The fast call is done long before the slow one: the blocking sleep holds only its own thread
    # (run on the caller's loop, the 1.5 s sleep would have delayed the fast call by 1.5 s).
    assert finished["fast"] < 0.75 and finished["slow"] >= 1.5
    executor.shutdown()


def test_parallel_blocking_calls_overlap():
    executor, tool = ToolExecutor(max_workers=8), SleepyTool({}, schema("sleepy"))

    async def eight():
        start = time.perf_counter()
        results = await asyncio.gather(*(executor.call(tool, str(i), {"seconds": 0.3}) for i in range(8)))
        return results, time.perf_counter() - start

    results, elapsed = run(eight())
    assert [r.text for r in results] == ["slept 0.3"] * 8
    assert elapsed < 1.2  # one after another: 8 * 0.3 = 2.4 s


def test_raising_tool_becomes_an_error_result():
    result = run(ToolExecutor().call(RaisingTool({}, schema("raiser")), "i", {}))
    assert result.text == "Error when executing tool raiser: ValueError: bad input 7"
    assert (result.reward, result.metrics, result.error) == (0.0, {}, "ValueError: bad input 7")


def test_blocking_tool_times_out_by_its_config():
    tool = SleepyTool({"timeout": 0.3}, schema("sleepy"))
    result = run(ToolExecutor().call(tool, "i", {"seconds": 1.5}))
    assert result.text == "Error when executing tool sleepy: timed out after 0.3 s"
    assert result.error == "timed out after 0.3 s" and 0.3 <= result.seconds < 1.2


def test_async_tool_is_cancelled_at_the_timeout():
    AsyncSleepyTool.cancelled = False
    executor = ToolExecutor(default_timeout_s=0.2)
    result = run(executor.call(AsyncSleepyTool({}, schema("waiter")), "i", {"seconds": 30}))
    assert result.error == "timed out after 0.2 s" and result.seconds < 1.0
    executor.shutdown(wait=True)
    assert AsyncSleepyTool.cancelled


def test_a_timeout_error_of_the_tool_itself_is_not_our_timeout():
    result = run(ToolExecutor().call(OwnTimeoutTool({}, schema("api")), "i", {}))
    assert result.error == "TimeoutError: upstream API timed out"


def test_timeout_defaults():
    executor = ToolExecutor()
    assert executor.timeout_for(BaseTool({"type": "native"}, schema("t"))) == DEFAULT_TOOL_TIMEOUT_S
    assert executor.timeout_for(BaseTool({"timeout": 2}, schema("t"))) == 2.0


def test_verl_0_5_shapes():
    executor, tool = ToolExecutor(), Verl05Tool({}, schema("old"))
    instance_id = run(executor.create(tool, "conv", {"ground_truth": "42"}))
    assert instance_id == "conv" and tool.states == {"conv": "42"}  # no create_kwargs= for a strict signature
    result = run(executor.call(tool, "conv", {"answer": "41"}))
    assert (result.text, result.reward, result.metrics, result.error) == ("truth=42 got=41", 1.0, {"calls": 1}, None)
    assert run(executor.calc_reward(tool, "conv")) == 1.0
    assert run(executor.release(tool, "conv")) is None and tool.released == ["conv"]


def test_verl_0_9_shapes():
    executor, tool = ToolExecutor(), Verl09Tool({}, schema("new"))
    assert run(executor.create(tool, None, {"ground_truth": "3"})) == "new"
    assert tool.seen["new"] == {"ground_truth": "3", "create_kwargs": {"ground_truth": "3"}}
    result = run(executor.call(tool, "new", {}))
    assert (result.text, result.reward, result.metrics, result.error) == ("", 0.0, {}, None)


def test_bad_execute_return_is_an_error_result():
    class Bare(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return "just text"

    result = run(ToolExecutor().call(Bare({}, schema("bare")), "i", {}))
    assert result.error == "TypeError: bare.execute returned str, not (response, reward, metrics)"


def test_create_and_calc_reward_failures_raise_tool_error_release_does_not():
    class Broken(BaseTool):
        async def create(self, instance_id=None, **kwargs):
            raise RuntimeError("no sandbox")

        async def calc_reward(self, instance_id, **kwargs):
            raise KeyError(instance_id)

        async def release(self, instance_id, **kwargs):
            raise RuntimeError("already gone")

    executor, tool = ToolExecutor(), Broken({}, schema("broken"))
    with pytest.raises(ToolError, match="Error when executing tool broken: RuntimeError: no sandbox"):
        run(executor.create(tool))
    with pytest.raises(ToolError, match="Error when executing tool broken: KeyError: 'x'"):
        run(executor.calc_reward(tool, "x"))
    assert run(executor.release(tool, "x")) == "RuntimeError: already gone"


def test_call_once_runs_the_lifecycle_and_releases_after_an_error():
    executor, tool = ToolExecutor(), Verl05Tool({}, schema("old"))
    result = run(executor.call_once(tool, {"answer": "1"}, {"create_kwargs": {"ground_truth": "9"}}))
    assert result.text == "truth=9 got=1" and tool.released == ["generated"]
    failed = run(executor.call_once(tool, {}, {"create_kwargs": {"ground_truth": "9"}}))  # no 'answer'
    assert failed.error == "KeyError: 'answer'" and tool.released == ["generated", "generated"]


def test_create_arguments_match_the_signature():
    async def strict(instance_id=None, ground_truth=None): ...
    async def open_ended(instance_id=None, **kwargs): ...
    async def explicit(instance_id=None, create_kwargs=None): ...

    assert create_arguments(strict, {"ground_truth": "1"}) == {"ground_truth": "1"}
    assert create_arguments(open_ended, {"a": 1}) == {"a": 1, "create_kwargs": {"a": 1}}
    assert create_arguments(explicit, {}) == {"create_kwargs": {}}
