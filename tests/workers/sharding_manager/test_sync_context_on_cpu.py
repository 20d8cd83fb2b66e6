"""``RolloutHandle.sync_context``: entered around the whole weight sync, the export's iterator and the last bucket
included (the Megatron worker brings offloaded actor params to the device with it; the end-to-end check is
``tests/megatron/test_megatron_offload_on_cpu.py``)."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from hybridrl.workers.sharding_manager import RolloutHandle


class RecordingEngine:
    """The part of a rollout engine a sync touches, noting whether the source was on the device at each bucket."""

    weight_dtype = torch.float32
    sample_mode = "strided"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def update_weights(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        self.events.append("bucket:" + ",".join(name for name, _ in bucket))


def _handle(events: list[str], on_device: list[bool]) -> RolloutHandle:
    def state_dict_fn(_module: nn.Module):
        for name in ("a", "b"):
            events.append(f"export:{name}:{'on' if on_device[0] else 'off'}")
            yield name, torch.ones(4)

    @contextlib.contextmanager
    def params_on_device():
        on_device[0] = True
        events.append("enter")
        try:
            yield
        finally:
            on_device[0] = False
            events.append("exit")

    return RolloutHandle(RecordingEngine(events), nn.Linear(2, 2), engine_name="recording", verify_weights=False,
                         state_dict_fn=state_dict_fn, sync_context=params_on_device)


def test_sync_context_wraps_the_export_and_the_last_bucket():
    events: list[str] = []
    handle = _handle(events, on_device=[False])
    metrics = handle.sync_weights()
    assert events == ["enter", "export:a:on", "export:b:on", "bucket:a,b", "exit"]
    assert metrics["rollout/weight_sync_tensors"] == 2.0
    assert not handle.weights_stale


def test_sync_context_exits_when_the_sync_fails():
    events: list[str] = []
    on_device = [False]
    handle = _handle(events, on_device)

    def broken_update(bucket):
        raise RuntimeError("engine gone")

    handle.engine.update_weights = broken_update
    with contextlib.suppress(RuntimeError):
        handle.sync_weights()
    assert events[0] == "enter" and events[-1] == "exit" and on_device == [False]
    assert handle.weights_stale  # nothing was marked synced


def test_default_sync_context_is_a_no_op():
    events: list[str] = []
    engine = RecordingEngine(events)
    handle = RolloutHandle(engine, nn.Linear(2, 2), engine_name="recording", verify_weights=False,
                           state_dict_fn=lambda _m: iter([("w", torch.zeros(2))]))
    handle.sync_weights()
    assert events == ["bucket:w"]
