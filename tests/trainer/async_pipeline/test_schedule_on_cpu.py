"""The async modes' schedule without Ray: a fake rollout queue runs the enqueued calls in order, as Ray does, so
the version each generation really uses is read off the event log and compared with what the pipeline recorded.
Expected staleness sequences are computed by hand in each test's docstring."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from hybridrl.trainer.ppo.async_pipeline import AsyncBatchSource, AsyncSettings
from hybridrl.trainer.ppo.async_pipeline.buffer import GenerationBuffer, InFlightBatch
from hybridrl.trainer.ppo.async_pipeline.schedule import VersionClock, may_launch, predicted_staleness, should_drop


@dataclass
class FakeOutput:
    meta_info: dict = field(default_factory=dict)


@dataclass
class EventLog:
    """The order in which the driver enqueued generations, updates and pushes (what Ray would execute)."""

    events: list = field(default_factory=list)

    def version_of_generation(self, gen_id: int, colocated: bool) -> int:
        version = 0
        for event in self.events:
            if event == ("gen", gen_id):
                return version
            if colocated and event[0] == "update":
                version += 1
            if not colocated and event[0] == "push":
                version = event[1]
        raise AssertionError(f"generation {gen_id} never enqueued")


class FakeLauncher:
    joins_before_worker_calls = False

    def __init__(self, log: EventLog) -> None:
        self.log, self.count = log, 0

    def launch(self, gen_batch):
        self.count += 1
        self.log.events.append(("gen", gen_batch["id"]))
        return FakeOutput

    def close(self) -> None:
        return None


class FakePusher:
    def __init__(self, log: EventLog) -> None:
        self.log = log

    def push(self, version: int) -> None:
        self.log.events.append(("push", version))

    def finished_metrics(self, wait: bool = False) -> dict:
        return {}


class FakeStep:
    """prepare: the generation's id is the prompt batch's id; score: the batch is the list of its prompts."""

    score_calls_workers = False

    def __init__(self) -> None:
        self.seeds = []  # (prompt batch id, launch step, gen_batch_index)

    def prepare(self, prompts, launch_step, gen_batch_index):
        self.seeds.append((prompts[0], launch_step, gen_batch_index))
        return list(prompts), {"id": prompts[0]}

    def score(self, batch, output, wait_s):
        return batch, {}


def _settings(mode="colocate_async", depth=1, sync_every=1, max_staleness=8, strategy="drop"):
    return AsyncSettings(mode=mode, depth=depth, sync_every=sync_every, max_staleness=max_staleness, strategy=strategy)


def _run(settings, steps, barriers=(), start=0, prompts=None):
    """Drive the source like the trainer; per step: (prompt batch id trained, staleness, buffer size, dropped)."""
    log = EventLog()
    prompts = prompts if prompts is not None else ([i, i] for i in itertools.count(1))
    step_fns = FakeStep()
    pusher = None if settings.colocated else FakePusher(log)
    source = AsyncBatchSource(settings, FakeLauncher(log), prompts, step_fns, pusher)
    source.start(start)
    total = start + steps
    barrier_steps = sorted(set(barriers) | {total})
    rows = []
    for step in range(start + 1, total + 1):
        last_step = next(b for b in barrier_steps if b >= step)
        batch, metrics = source.next_batch(step, last_step)
        staleness = metrics["training/off_policy/trajectory_staleness/max"]
        version = log.version_of_generation(batch[0], settings.colocated)
        assert staleness == step - 1 - version  # what the pipeline recorded is what the queue order gives
        assert staleness <= settings.max_staleness
        rows.append((batch[0], int(staleness), metrics["async/buffer_size"], metrics["async/dropped_batches"]))
        log.events.append(("update", step))
        source.after_update(step, last_step, barrier=step == last_step)
    return rows, log, step_fns


def test_colocate_one_step_off():
    """k=1: batch 1 by version 0 trained at 0 (staleness 0); batch t+1 is enqueued before update t, so it is made
    by version t-1 and trained at version t (1). The last step enqueues nothing (barrier)."""
    rows, _, _ = _run(_settings(), steps=4)
    assert rows == [(1, 0, 1, 0), (2, 1, 1, 0), (3, 1, 1, 0), (4, 1, 0, 0)]


def test_colocate_barrier_drains_the_pipeline():
    """Barrier at 2: step 2 enqueues nothing ahead, so step 3's batch is made after update 2 (staleness 0)."""
    rows, log, _ = _run(_settings(), steps=4, barriers=(2,))
    assert [r[1] for r in rows] == [0, 1, 0, 1]
    assert [r[2] for r in rows] == [1, 0, 1, 0]
    assert log.events[:6] == [("gen", 1), ("gen", 2), ("update", 1), ("update", 2), ("gen", 3), ("gen", 4)]


def test_colocate_two_batches_ahead():
    """k=2: steps 1-3 train batches of version 0 (staleness 0, 1, 2); then batch t+2 is enqueued during step t
    before update t (version t-1) and trained at version t+1: staleness 2."""
    rows, _, _ = _run(_settings(depth=2), steps=5)
    assert [r[1] for r in rows] == [0, 1, 2, 2, 2]
    assert [r[2] for r in rows] == [2, 2, 2, 1, 0]


def test_separate_pushes_every_parameter_sync_step():
    """k=1, pushes after updates 2 and 4. Batch j >= 2 is enqueued during step j-1, before update j-1, with the
    weights of the last push: 2*floor((j-2)/2) -> 0, 0, 2, 2, 4 for j = 2..6; trained at version j-1:
    staleness 0, 1, 2, 1, 2, 1."""
    rows, log, _ = _run(_settings("separate_async", sync_every=2), steps=6)
    assert [r[1] for r in rows] == [0, 1, 2, 1, 2, 1]
    assert [e for e in log.events if e[0] == "push"] == [("push", 2), ("push", 4), ("push", 6)]


def test_separate_drop_discards_batches_over_the_threshold():
    """As above with threshold 1 and drop: at step 3, batch 3 (version 0, staleness 2) is dropped, batch 4
    (enqueued during step 3, after push 2) is trained with staleness 0, batch 5 is enqueued to refill; step 4
    trains batch 5 (version 2 at version 3: 1); step 5 drops batch 6 (version 2 at 4) and trains batch 7."""
    rows, _, _ = _run(_settings("separate_async", sync_every=2, max_staleness=1), steps=5)
    assert [(r[0], r[1], r[3]) for r in rows] == [(1, 0, 0), (2, 1, 0), (4, 0, 1), (5, 1, 1), (7, 0, 2)]


def test_separate_wait_holds_generations_back_instead():
    """threshold 1, wait: during step 2, batch 3 would be made by version 0 and trained at 2 (staleness 2), so it
    is enqueued only after push 2; nothing is dropped and staleness alternates 0, 1."""
    rows, log, _ = _run(_settings("separate_async", sync_every=2, max_staleness=1, strategy="wait"), steps=6)
    assert [r[1] for r in rows] == [0, 1, 0, 1, 0, 1]
    assert [r[3] for r in rows] == [0] * 6
    assert log.events.index(("gen", 3)) > log.events.index(("push", 2))


def test_resume_at_a_barrier_repeats_the_uninterrupted_run():
    """Uninterrupted 4 steps with a barrier at 2 vs a source started at step 2 with the prompts after the two
    consumed batches: the same prompt batches, seeds (launch step, index) and staleness for steps 3-4."""
    settings = _settings("separate_async", sync_every=3)
    rows, _, full_step = _run(settings, steps=4, barriers=(2,))
    resumed_rows, log, resumed_step = _run(settings, steps=2, start=2, prompts=([i, i] for i in itertools.count(3)))
    assert resumed_rows == rows[2:]
    assert resumed_step.seeds == full_step.seeds[2:]
    assert log.events[0] == ("push", 2)  # the rollout pool gets the restored weights first


def test_clock_and_rules():
    clock = VersionClock(trainer_version=0, rollout_version=0)
    separate = _settings("separate_async", sync_every=2)
    assert [clock.after_update(separate) for _ in range(4)] == [False, True, False, True]
    assert clock.staleness(1) == 3
    colocated = VersionClock(0, 0)
    colocated.after_update(_settings())
    assert colocated.rollout_version == 1
    assert predicted_staleness(train_step=5, rollout_version=2) == 2  # trained at version 4
    wait = _settings(strategy="wait", max_staleness=2)
    assert may_launch(wait, 5, 2, last_step=9) and not may_launch(wait, 6, 2, last_step=9)
    assert not may_launch(_settings(), 6, 5, last_step=5)  # past the barrier
    assert should_drop(_settings(max_staleness=2), 3) and not should_drop(_settings(max_staleness=2), 2)
    assert not should_drop(_settings(max_staleness=2, strategy="wait"), 3)


def test_buffer_is_bounded_and_fifo():
    buffer = GenerationBuffer(capacity=2)
    for version in (0, 1):
        buffer.put(InFlightBatch([version], lambda: None, version, launch_step=1, gen_batch_index=version))
    assert buffer.full and buffer.versions() == [0, 1]
    with pytest.raises(RuntimeError, match="full"):
        buffer.put(InFlightBatch([2], lambda: None, 2, 1, 2))
    assert buffer.pop_oldest().version == 0
    buffer.pop_oldest()
    with pytest.raises(RuntimeError, match="empty"):
        buffer.pop_oldest()


def test_settings_from_config():
    from tests.config_testlib import compose_config

    assert AsyncSettings.from_config(compose_config("ppo_trainer").trainer) is None  # sync: verl 0.5's loop
    config = compose_config("ppo_trainer", ["trainer.v1.trainer_mode=separate_async",
                                            "trainer.v1.separate_async.num_warmup_batches=2",
                                            "trainer.v1.sampler.max_off_policy_strategy=wait"])
    assert AsyncSettings.from_config(config.trainer) == _settings("separate_async", depth=2, sync_every=4,
                                                                   strategy="wait")
