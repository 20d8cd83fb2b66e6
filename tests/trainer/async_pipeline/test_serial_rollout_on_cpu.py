"""separate_async with a blocking rollout (the agent loop): generations and weight loads run on one driver thread in
the order they were enqueued. Fakes stand in for the agent-loop manager and the worker groups (unit test of the
launcher and the pusher; the real run is test_async_modes_e2e_on_cpu.py::test_separate_async_with_the_agent_loop)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from hybridrl.trainer.ppo.async_pipeline import launchers
from hybridrl.trainer.ppo.async_pipeline.launchers import (
    SPAN_END_KEY,
    SPAN_START_KEY,
    RayGenerationLauncher,
    SerialRolloutLauncher,
    ThreadGenerationLauncher,
    WeightPusher,
    make_launcher,
    pop_rollout_span,
)
from tests.trainer.async_pipeline.test_schedule_on_cpu import FakeOutput


@dataclass
class FakeRollout:
    """Blocking ``generate_sequences`` (as the agent-loop manager); records which weights each call used."""

    log: list = field(default_factory=list)
    version: int = 0
    busy: bool = False

    def generate_sequences(self, batch_id: int) -> FakeOutput:
        assert not self.busy, "two jobs overlapped on the rollout"
        self.busy = True
        time.sleep(0.02)  # long enough for a job submitted meanwhile to overlap, were the thread not serial
        self.log.append(("gen", batch_id, self.version, threading.current_thread().name))
        self.busy = False
        return FakeOutput()


class FakeActorGroup:
    def publish_weights(self, version: int) -> list:
        return [{"version": version}, None]  # rank 0's package, rank 1's None


def test_make_launcher_picks_by_rollout_and_pool():
    class Group:
        def generate_sequences_nonblocking(self, batch):  # a worker group
            return batch

    assert isinstance(make_launcher(Group(), own_pool=True), RayGenerationLauncher)
    colocated, separate = make_launcher(FakeRollout()), make_launcher(FakeRollout(), own_pool=True)
    assert type(colocated) is ThreadGenerationLauncher and colocated.joins_before_worker_calls
    assert isinstance(separate, SerialRolloutLauncher) and not separate.joins_before_worker_calls
    colocated.close()
    separate.close()


def test_generations_and_loads_run_in_enqueue_order(monkeypatch):
    """gen 1, gen 2, push v1, gen 3, push v2, gen 4 → the generations see versions 0, 0, 1, 2; no two jobs overlap
    (FakeRollout asserts it); the pushes' metrics are summed once both are applied."""
    rollout = FakeRollout()

    def receive(rollout_group, package):  # stands in for the rollout ranks' receive_weights
        assert not rollout.busy, "a weight load overlapped a generation"
        time.sleep(0.01)
        rollout.version = package["version"]
        rollout.log.append(("load", package["version"]))
        return [{"rollout/weight_sync_mb": 1.5}, {"rollout/weight_sync_mb": 1.5}]

    monkeypatch.setattr(launchers, "_receive", receive)
    launcher = make_launcher(rollout, own_pool=True)
    pusher = WeightPusher(FakeActorGroup(), rollout_group=None, serial=launcher)
    results = [launcher.launch(1), launcher.launch(2)]
    pusher.push(1)
    results.append(launcher.launch(3))
    pusher.push(2)
    results.append(launcher.launch(4))
    outputs = [result() for result in results]
    assert pusher.finished_metrics(wait=True) == {"rollout/weight_sync_mb": 3.0, "rollout/weight_pushes": 2.0}
    assert pusher.finished_metrics(wait=True) == {}
    launcher.close()
    assert [entry[:3] for entry in rollout.log] == [
        ("gen", 1, 0), ("gen", 2, 0), ("load", 1), ("gen", 3, 1), ("load", 2), ("gen", 4, 2)]
    assert {entry[3] for entry in rollout.log if entry[0] == "gen"} != {threading.current_thread().name}
    spans = [pop_rollout_span(output) for output in outputs]
    assert all(start <= end for start, end in spans)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(3))  # one after the other
    assert SPAN_START_KEY not in outputs[0].meta_info["metrics"] and SPAN_END_KEY not in outputs[0].meta_info["metrics"]
