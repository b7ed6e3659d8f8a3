"""Fenced checkpoints, the coordinator's leader election, the sweeper's repairs and the peak forecast."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import coordinator.main as coordinator_main
from coordinator.forecast import forecast
from coordinator.sweeper import Repair, Sweeper
from tests.integration.dispatch.conftest import SHARDS, new_run, wait_until, write_interval_job
from tickwheel import metrics
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.settings import Settings
from tickwheel.store import checkpoints
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import get_job
from tickwheel.store.runs import create_run
from tickwheel.store.tables import CassandraTables


async def test_a_stale_epoch_cannot_move_a_checkpoint_back(store: CassandraStore, dsettings: Settings) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    assert await checkpoints.advance(store, {7: now}, 3, "m-new", now) == {7: True}
    assert await checkpoints.advance(store, {7: now + timedelta(seconds=9)}, 2, "m-old", now) == {7: False}
    assert await checkpoints.advance(store, {7: now + timedelta(seconds=5)}, 3, "m-new", now) == {7: True}
    [mark] = (await checkpoints.read(store, [7])).values()
    assert (mark.fired_through, mark.owner_epoch, mark.owner) == (now + timedelta(seconds=5), 3, "m-new")


async def test_one_coordinator_leads_and_another_takes_over_when_it_stops(
    store: CassandraStore, dsettings: Settings
) -> None:
    a = await coordinator_main.start(dsettings, store=store, name="coord-a")
    b = await coordinator_main.start(dsettings, store=store, name="coord-b")
    try:
        await wait_until(lambda: a.coordinator.leader or b.coordinator.leader)
        await asyncio.sleep(0.5)
        assert a.coordinator.leader != b.coordinator.leader
        leader, other = (a, b) if a.coordinator.leader else (b, a)
        await wait_until(lambda: leader.coordinator.assignment is not None)
        before = leader.coordinator.assignment
        await leader.stop()
        await wait_until(lambda: other.coordinator.leader)
        assert before is not None
        published = await other.coordinator.publish(["m-0000000001"])
        assert published is not None and published.epoch == before.epoch + 1
        assert published.members == {"m-0000000001": [(0, SHARDS)]}
    finally:
        await a.stop()
        await b.stop()


async def test_the_sweeper_repairs_a_missing_and_an_overdue_next_run_and_counts_them(
    store: CassandraStore, dsettings: Settings
) -> None:
    now = datetime.now(UTC)
    soon = (now + timedelta(seconds=60)).replace(microsecond=0)
    missing_job, missing_run = await write_interval_job(store, soon, every_s=60)
    await store.execute("DELETE FROM runs WHERE run_id = ?", [missing_run.run_id])
    long_ago = (now - timedelta(minutes=30)).replace(microsecond=0)
    overdue_job, overdue_run = await write_interval_job(store, long_ago, every_s=3600)
    healthy_job, _ = await write_interval_job(store, soon, every_s=60)
    producer = KafkaProducer(dsettings.kafka)
    sweeper = Sweeper(dsettings, CassandraTables(store), producer)
    counted = metrics.sweeper_repairs.labels(reason=Repair.RECREATE.value)._value.get()
    try:
        for job_id in (missing_job, overdue_job, healthy_job):
            row = await get_job(store, job_id)
            assert row is not None
            await sweeper.check(row, now)
    finally:
        await producer.close()
    assert metrics.sweeper_repairs.labels(reason=Repair.RECREATE.value)._value.get() == counted + 1
    [recreated] = await store.execute("SELECT status, scheduled_at FROM runs WHERE run_id = ?", [missing_run.run_id])
    assert recreated == {"status": "SCHEDULED", "scheduled_at": soon.replace(tzinfo=None)}
    [refired] = await store.execute("SELECT due_at FROM runs WHERE run_id = ?", [overdue_run.run_id])
    assert refired["due_at"] >= now.replace(tzinfo=None, microsecond=0)
    bucket = now.replace(second=0, microsecond=0, tzinfo=None)
    rows = await store.execute(
        "SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?", [bucket, overdue_run.shard]
    )
    assert overdue_run.run_id in {r["run_id"] for r in rows}


async def test_the_sweeper_logs_every_repair_with_the_job_id(
    store: CassandraStore, dsettings: Settings, caplog: object
) -> None:
    import logging

    soon = (datetime.now(UTC) + timedelta(seconds=90)).replace(microsecond=0)
    job_id, run = await write_interval_job(store, soon, every_s=60)
    await store.execute("DELETE FROM runs WHERE run_id = ?", [run.run_id])
    producer = KafkaProducer(dsettings.kafka)
    with caplog.at_level(logging.WARNING, logger="coordinator.sweeper"):  # type: ignore[attr-defined]
        row = await get_job(store, job_id)
        assert row is not None
        sweeper = Sweeper(dsettings, CassandraTables(store), producer)
        assert await sweeper.check(row, datetime.now(UTC)) is Repair.RECREATE
    await producer.close()
    [record] = [r for r in caplog.records if r.name == "coordinator.sweeper"]  # type: ignore[attr-defined]
    assert record.levelno == logging.WARNING and record.job_id == str(job_id)


async def test_the_forecast_counts_the_runs_due_in_each_coming_minute(
    store: CassandraStore, dsettings: Settings
) -> None:
    # A far-future hour keeps other tests' runs out of the counted minutes; the runs are written as at that hour
    # (written today they would wait in runs_far until the mover brings them near).
    base = datetime(2031, 1, 1, 0, 0, tzinfo=UTC)
    for minute, count in ((0, 3), (2, 5)):
        for i in range(count):
            await create_run(store, new_run(uuid.uuid4(), base + timedelta(minutes=minute, seconds=i)), base)
    s = dataclasses.replace(dsettings, shards=SHARDS)
    assert await forecast(CassandraTables(store), base + timedelta(seconds=30), 4, s.shards) == [3, 0, 5, 0]
    assert metrics.forecast_due.labels(minutes_ahead="2")._value.get() == 5
