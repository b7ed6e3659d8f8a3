"""The dispatcher engine's decisions against the in-memory store and bus (no servers): it fires what is due on
the shards it owns, chains a recurring job as it fires, sends a lease check only while the lease has lapsed,
puts a send the bus refused back, checkpoints under its epoch, and drops a shard a newer epoch has taken."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.engine import Dispatcher
from dispatcher.ownership import OwnershipChange
from schemas.messages import ShardAssignment, topic_names
from tests.factories import definition, job
from tests.unit.dispatch.reads import count_group_reads
from tickwheel.bus.memory import MemoryBus, MemoryNearFeed
from tickwheel.settings import Settings
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import NewRun

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)


class Scene:
    """One dispatcher over a memory store and bus, at a clock the test moves."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.store = MemoryStore()
        self.bus = MemoryBus()
        self.now = NOW
        k = self.settings.kafka
        self.near = MemoryNearFeed(self.bus, k.topic_prefix, k.near_partitions, self.settings.shards)
        self.engine = Dispatcher(
            self.settings, self.store, self.bus, self.near, name="d", clock=lambda: self.now.timestamp()
        )
        self.topics = topic_names(k.topic_prefix)

    async def own(self, *shards: int, epoch: int = 1) -> None:
        """Become the member owning `shards` under `epoch` (what an assignment from the coordinator does)."""
        self.engine.set_member("m")
        self.engine.confirm_alive()
        change = OwnershipChange(epoch, frozenset(shards), frozenset(), frozenset())
        await self.engine.apply(change)

    async def fire(self, at: datetime) -> None:
        self.now = at
        self.engine.fire_due()
        await self.engine.settle()

    def sent(self, lane: str = "default") -> list[tuple[object, int, str]]:
        return [(r.run_id, r.attempt, r.kind) for r in self.bus.on(self.topics[lane])]


@pytest.fixture
async def scene() -> AsyncIterator[Scene]:
    made = Scene()
    yield made
    await made.engine.stop()


async def a_run(scene: Scene, at: datetime, *, every_s: int | None = None, shard: int | None = None) -> NewRun:
    """A job whose next run is due `at` (on `shard` if given), written as the API writes it."""
    made, run = job(at, job_definition=definition(every_s=every_s, anchor=at))
    if shard is not None:
        made, run = dataclasses.replace(made, shard=shard), dataclasses.replace(run, shard=shard)
    await scene.store.create_job(made, run, NOW)
    return run


async def test_a_run_due_on_an_owned_shard_fires_at_its_time_and_once(scene: Scene) -> None:
    run = await a_run(scene, NOW + timedelta(seconds=10))
    await scene.own(run.shard)
    await scene.fire(NOW + timedelta(seconds=9))
    assert scene.sent() == []
    await scene.fire(NOW + timedelta(seconds=10))
    await scene.fire(NOW + timedelta(seconds=11))
    assert scene.sent() == [(run.run_id, 0, "run")]


async def test_a_run_on_a_shard_not_owned_never_fires(scene: Scene) -> None:
    run = await a_run(scene, NOW)
    await scene.own((run.shard + 1) % scene.settings.shards)
    await scene.fire(NOW + timedelta(seconds=5))
    assert scene.sent() == []


async def test_firing_a_recurring_run_chains_its_next_run_into_the_wheel(scene: Scene) -> None:
    run = await a_run(scene, NOW + timedelta(seconds=1), every_s=30)
    await scene.own(run.shard)
    await scene.fire(NOW + timedelta(seconds=1))
    job = scene.store.jobs[run.job_id]
    following = scene.store.runs[job.next_run_id] if job.next_run_id else None
    assert following is not None and following.scheduled_at == run.scheduled_at + timedelta(seconds=30)
    assert job.fired_count == 1
    await scene.fire(NOW + timedelta(seconds=31))  # loaded straight into the wheel: no rescan needed
    assert scene.sent() == [(run.run_id, 0, "run"), (following.run_id, 0, "run")]


async def test_a_lease_check_goes_out_only_while_its_attempt_still_runs_past_the_lease(scene: Scene) -> None:
    run = await a_run(scene, NOW)
    lease_until = NOW + timedelta(seconds=5)
    await scene.store.claim(run, 0, "w", lease_until, NOW)
    await scene.own(run.shard)
    await scene.fire(NOW + timedelta(seconds=6))
    assert (run.run_id, 1, "lease_check") in scene.sent()
    finished = await a_run(scene, NOW + timedelta(seconds=20), shard=run.shard)
    await scene.store.claim(finished, 0, "w", NOW + timedelta(seconds=25), NOW)
    await scene.store.expire_lease(finished, 1, None, NOW + timedelta(hours=1))  # no longer running
    await scene.fire(NOW + timedelta(seconds=30))
    assert (finished.run_id, 1, "lease_check") not in scene.sent()


async def test_a_send_the_bus_refused_goes_out_once_the_bus_is_back(scene: Scene) -> None:
    run = await a_run(scene, NOW + timedelta(seconds=1))
    await scene.own(run.shard)
    scene.bus.down = True
    await scene.fire(NOW + timedelta(seconds=1))
    assert scene.sent() == []
    scene.bus.down = False
    await scene.fire(NOW + timedelta(seconds=3))
    assert scene.sent() == [(run.run_id, 0, "run")]


async def test_a_checkpoint_is_written_under_the_owner_epoch_and_stops_at_what_is_unsent(scene: Scene) -> None:
    run = await a_run(scene, NOW + timedelta(seconds=1))
    await scene.own(run.shard, epoch=3)
    await scene.fire(NOW + timedelta(seconds=2))
    assert await scene.engine.checkpointer.checkpoint(force=True) == {run.shard: True}
    mark = scene.store.checkpoints[run.shard]
    assert (mark.owner_epoch, mark.owner, mark.fired_through) == (3, "m", NOW + timedelta(seconds=2))
    scene.bus.down = True
    late = await a_run(scene, NOW + timedelta(seconds=4), shard=run.shard)  # after the preload: the rescan reads it
    await scene.engine.horizon.rescan()
    await scene.fire(NOW + timedelta(seconds=8))
    await scene.engine.checkpointer.checkpoint(force=True)
    assert scene.store.checkpoints[late.shard].fired_through <= NOW + timedelta(seconds=4)


async def test_a_row_written_after_its_minute_last_rescan_and_never_announced_is_found_by_the_next(
    scene: Scene,
) -> None:
    """Run 11 of the soak: a run due later in the minute it was written, its announcement failed after that
    minute's last rescan, and the next rescan read only the next minute: the sweeper found it 388 s late."""
    first = await a_run(scene, NOW + timedelta(seconds=1))
    await scene.own(first.shard)
    await scene.fire(NOW + timedelta(seconds=2))
    await scene.engine.horizon.rescan()  # 12:00:32, the minute's last rescan
    missed = await a_run(scene, NOW + timedelta(seconds=20), shard=first.shard)  # due 12:00:50, not announced
    scene.now = NOW + timedelta(seconds=45)  # 12:01:15: the next rescan, in the next minute
    assert await scene.engine.horizon.rescan() == 1
    await scene.fire(NOW + timedelta(seconds=46))
    assert scene.sent() == [(first.run_id, 0, "run"), (missed.run_id, 0, "run")]
    assert await scene.engine.horizon.rescan() == 0  # fired, so not again


async def test_a_rescan_warns_only_of_runs_it_found_already_due(scene: Scene, caplog: pytest.LogCaptureFixture) -> None:
    """A run found before it is due (its announcement still on the way) fires on time: noted, not a warning; one
    found when already due was delivered late, which someone must look at."""
    first = await a_run(scene, NOW + timedelta(seconds=1))
    await scene.own(first.shard)
    ahead = await a_run(scene, NOW + timedelta(seconds=20), shard=first.shard)  # due 12:00:50, not announced
    with caplog.at_level(logging.INFO, logger="dispatcher.horizon"):
        assert await scene.engine.horizon.rescan() == 1  # 12:00:30
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records] == [
        (
            logging.INFO,
            "rescan found 1 runs that neither the preload nor the near-term topic delivered, 0 already due",
        )
    ]
    await scene.fire(NOW + timedelta(seconds=21))
    caplog.clear()
    late = await a_run(scene, NOW + timedelta(seconds=22), shard=first.shard)  # due 12:00:52, not announced
    scene.now = NOW + timedelta(seconds=25)  # 12:00:55: found three seconds late
    with caplog.at_level(logging.INFO, logger="dispatcher.horizon"):
        assert await scene.engine.horizon.rescan() == 1
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert f"1 already due: {late.run_id} run #0" in caplog.records[0].getMessage()
    assert str(ahead.run_id) not in caplog.records[0].getMessage()


async def test_a_rescan_reads_names_and_whole_rows_only_of_the_shards_holding_a_row_the_wheel_does_not_know(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = [
        await a_run(scene, NOW + timedelta(seconds=5), shard=1),
        await a_run(scene, NOW + timedelta(seconds=6), shard=2),
    ]
    await scene.own(1, 2, 3)
    whole = count_group_reads(scene.store, monkeypatch)
    assert await scene.engine.horizon.rescan() == 0
    assert whole == [], "every row is in the wheel: only their names were read"
    late = await a_run(scene, NOW + timedelta(seconds=20), shard=2)  # written after the preload, not announced
    assert await scene.engine.horizon.rescan() == 1
    assert whole == [[2]], "the shard with the unknown row is read whole, the others not"
    await scene.fire(NOW + timedelta(seconds=21))
    assert sorted(str(run_id) for run_id, _, _ in scene.sent()) == sorted(str(r.run_id) for r in [*known, late])


async def test_a_shard_checkpointed_under_a_newer_epoch_is_dropped_and_no_longer_fired(scene: Scene) -> None:
    run = await a_run(scene, NOW + timedelta(seconds=5))
    await scene.own(run.shard, epoch=1)
    await scene.store.advance_checkpoints({run.shard: NOW}, 2, "other", NOW)  # a newer owner took the shard
    assert await scene.engine.checkpointer.checkpoint(force=True) == {run.shard: False}
    assert run.shard not in scene.engine.table.owned
    await scene.fire(NOW + timedelta(seconds=6))
    assert scene.sent() == []


async def test_a_new_owner_resumes_from_the_checkpoint_minus_the_grace(scene: Scene) -> None:
    missed = await a_run(scene, NOW - timedelta(seconds=30))  # the previous owner may not have sent it
    await a_run(scene, NOW - timedelta(minutes=10), shard=missed.shard)  # before the watermark and its grace
    await scene.store.advance_checkpoints({missed.shard: NOW - timedelta(seconds=20)}, 1, "before", NOW)
    await scene.own(missed.shard, epoch=2)
    await scene.fire(NOW)
    assert scene.sent() == [(missed.run_id, 0, "run")]


async def test_stopping_reports_a_task_that_died_with_an_error(scene: Scene, caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise RuntimeError("a bug in a loop")

    scene.engine._spawn(broken(), name="broken loop")
    scene.engine.start()
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="dispatcher.engine"):
        await scene.engine.stop()
    assert [r.getMessage() for r in caplog.records] == ["dispatcher task broken loop ended with an error"]
    assert not scene.engine._tasks


async def test_a_dispatcher_is_ready_only_once_it_has_applied_its_assignment_and_read_every_shard_it_owns(
    scene: Scene,
) -> None:
    engine = scene.engine
    assert not engine.ready()  # not registered
    engine.set_member("m")
    engine.confirm_alive()
    engine.offer(ShardAssignment(epoch=1, shards=scene.settings.shards, members={"m": [(0, 2)]}))
    assert not engine.ready()  # the assignment gives it shards it has not acquired yet
    await engine.apply(OwnershipChange(1, frozenset({0, 1}), frozenset(), frozenset()))
    assert engine.ready()  # acquired and scanned
    engine.table.owned[1] = dataclasses.replace(engine.table.owned[1], scanned=False)
    assert not engine.ready()  # a shard whose horizon is still being read
