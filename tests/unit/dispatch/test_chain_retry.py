"""A chaining that fails because Cassandra does not answer (a node leaving or rejoining) is tried again by the
dispatcher itself, a moment later, instead of waiting for the sweeper's grace (300 s: the soak's cron occurrences
were 345-365 s late)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from dispatcher.engine import Dispatcher
from dispatcher.ownership import OwnershipChange
from schemas.messages import topic_names
from tests.factories import definition, job
from tickwheel.bus.memory import MemoryBus, MemoryNearFeed
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import Job, NewRun, Pointer

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)


class TimingOutStore(MemoryStore):
    """The in-memory store whose job pointer move (the chaining LWT) times out `failures` times first."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def move_pointer(
        self, job: Job, current_run_id: uuid.UUID, following: NewRun | None, fired_count: int, now: datetime
    ) -> Pointer:
        if self.failures > 0:
            self.failures -= 1
            raise Unavailable("Cassandra did not answer: WriteTimeout (CAS)")
        return await super().move_pointer(job, current_run_id, following, fired_count, now)


async def fire_with_failing_chain(failures: int) -> tuple[TimingOutStore, NewRun, list[float]]:
    settings = Settings()
    store, bus = TimingOutStore(failures), MemoryBus()
    now = [NOW.timestamp()]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the test's time: a wait moves the clock, nothing waits
        waits.append(seconds)
        now[0] += seconds
        await asyncio.sleep(0)

    k = settings.kafka
    near = MemoryNearFeed(bus, k.topic_prefix, k.near_partitions, settings.shards)
    engine = Dispatcher(settings, store, bus, near, name="d", clock=lambda: now[0], sleep=sleep)
    first = NOW + timedelta(seconds=1)
    made, run = job(first, job_definition=definition(every_s=30, anchor=first))
    await store.create_job(made, run, NOW)
    engine.set_member("m")
    engine.confirm_alive()
    await engine.apply(OwnershipChange(1, frozenset({run.shard}), frozenset(), frozenset()))
    now[0] = (NOW + timedelta(seconds=1)).timestamp()
    engine.fire_due()
    await engine.settle()
    while chaining := [t for t in engine._tasks if t.get_name().startswith("chain ")]:
        await asyncio.wait(chaining)
    assert [r.run_id for r in bus.on(topic_names(k.topic_prefix)["default"])] == [run.run_id]  # fired on time
    await engine.stop()
    return store, run, waits


async def test_a_chaining_that_timed_out_is_retried_by_the_dispatcher_within_seconds() -> None:
    store, run, waits = await fire_with_failing_chain(failures=3)
    job = store.jobs[run.job_id]
    assert job.next_run_id is not None and job.next_run_id != run.run_id, "the job was not chained"
    assert store.runs[job.next_run_id].scheduled_at == run.scheduled_at + timedelta(seconds=30)
    assert waits == [0.5, 1.0, 2.0]


async def test_a_chaining_failing_for_long_is_left_to_the_sweeper_before_the_run_could_count_as_missed() -> None:
    store, run, waits = await fire_with_failing_chain(failures=1000)
    assert store.jobs[run.job_id].next_run_id == run.run_id  # not chained: the sweeper's
    assert sum(waits) < Settings().dispatcher.missed_after_s / 2
