"""Runs due far ahead (20 days, 400 days, 30 years, monthly and yearly crons) keep every row they need until
they are due, and fire when their time comes: asserted from Cassandra's own TTLs, then fired by a dispatcher
whose clock is moved to the due time (no waiting)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

import dispatcher.main as dispatcher_main
from coordinator.mover import FarMover
from schemas.messages import HttpTarget, JobDefinition, ScheduleDoc
from tests.integration.dispatch.conftest import Cluster, LaneReader, write_job
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.core.horizon import MAX_TTL_S, RUN_RETENTION, RUN_RETENTION_S, day_of
from tickwheel.core.ids import minute_bucket
from tickwheel.core.schedule import next_fire
from tickwheel.model import schedule_of
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.chain import ChainResult, chain
from tickwheel.store.runs import NewRun, RunStatus, get_run
from tickwheel.store.tables import CassandraTables

SLACK_S = 120
BUCKET_TTL_S = 14 * 86400


def _naive(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(tzinfo=None)


async def far_run(store: CassandraStore, case: str, now: datetime) -> NewRun:
    """The run of `case` that is due far ahead: a once job's only run, or the run a cron chains at fire time."""
    whole = now.replace(microsecond=0)
    if case.startswith("once"):
        ahead = {"once in 20 days": timedelta(days=20), "once in 400 days": timedelta(days=400)}
        due = whole + ahead.get(case, timedelta(days=365 * 30 + 7))
        return await write_job(store, ScheduleDoc(type="once", run_at=due.isoformat()), due)
    expr = {"monthly cron": "0 0 1 * *", "yearly cron": "0 0 1 1 *"}[case]
    schedule = ScheduleDoc(type="cron", expr=expr, tz="UTC")
    current_at = next_fire(schedule_of(JobDefinition(schedule=schedule, target=HttpTarget(url="https://x.io"))), now)
    assert current_at is not None
    current = await write_job(store, schedule, current_at)
    # what the dispatcher does when it fires
    step = await chain(CassandraTables(store), due_run_for(current), now, retention_s=RUN_RETENTION_S)
    assert step.result is ChainResult.CHAINED and step.following is not None
    return step.following


async def ttl_of(store: CassandraStore, query: str, params: list[object]) -> int | None:
    rows = await store.execute(query, params)
    assert rows, f"no row for {query}"
    value = rows[0]["t"]
    return None if value is None else int(value)


CASES = ["once in 20 days", "once in 400 days", "once in 30 years", "monthly cron", "yearly cron"]


@pytest.mark.parametrize("case", CASES)
async def test_a_run_due_far_ahead_keeps_its_rows_and_fires_when_due(
    case: str, dsettings: Settings, store: CassandraStore, cluster: Cluster, lanes: LaneReader
) -> None:
    now = datetime.now(UTC)
    run = await far_run(store, case, now)
    due = run.fire_at
    assert due - now > timedelta(days=19)

    # Every row the run needs outlives its due time (by the retention), or waits without a TTL.
    outlives = int((due - now).total_seconds()) + int(RUN_RETENTION.total_seconds()) - SLACK_S
    run_ttl = await ttl_of(store, "SELECT TTL(job_id) AS t FROM runs WHERE run_id = ?", [run.run_id])
    history_ttl = await ttl_of(
        store,
        "SELECT TTL(status) AS t FROM runs_by_job WHERE job_id = ? AND scheduled_at = ? AND run_id = ?",
        [run.job_id, _naive(run.scheduled_at), run.run_id],
    )
    for ttl in (run_ttl, history_ttl):
        assert ttl is not None and ttl >= min(outlives, MAX_TTL_S - SLACK_S)
    far_ttl = await ttl_of(
        store,
        "SELECT TTL(job_id) AS t FROM runs_far WHERE day = ? AND shard = ? AND fire_at = ? AND run_id = ?",
        [_naive(day_of(due)), run.shard, _naive(due), run.run_id],
    )
    assert far_ttl is None  # waits as long as it takes
    assert await ttl_of(store, "SELECT TTL(definition) AS t FROM jobs WHERE job_id = ?", [run.job_id]) is None
    bucket = [_naive(minute_bucket(due)), run.shard]
    assert not await store.execute("SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?", bucket)

    if case == "once in 30 years":  # beyond Cassandra's 20-year TTL: the run row is gone when the mover comes
        assert run_ttl is not None and run_ttl <= MAX_TTL_S
        await store.execute("DELETE FROM runs WHERE run_id = ?", [run.run_id])

    # The mover, a day before the run is due, writes its bucket row with the table's whole TTL.
    producer = KafkaProducer(dsettings.kafka)
    try:
        mover = FarMover(dsettings, CassandraTables(store), producer)
        assert await mover.move(due - timedelta(days=1)) >= 1  # other tests' far runs may share the days
    finally:
        await producer.close()
    rows = await store.execute(
        "SELECT run_id, TTL(job_id) AS t FROM runs_by_bucket WHERE bucket = ? AND shard = ?", bucket
    )
    assert [r["run_id"] for r in rows] == [run.run_id]
    assert rows[0]["t"] >= BUCKET_TTL_S - SLACK_S  # and it was written a day before the run is due
    assert not await store.execute(
        "SELECT run_id FROM runs_far WHERE day = ? AND shard = ?", [_naive(day_of(due)), run.shard]
    )
    stored = await get_run(store, run.run_id)
    assert stored is not None and stored.status == RunStatus.SCHEDULED

    # A dispatcher whose clock reads five seconds before the due time fires it.
    await cluster(0)  # the coordinator, assigning shards
    offset_s = (due - timedelta(seconds=5)).timestamp() - time.time()
    running = await dispatcher_main.start(dsettings, store=store, name="disp-far", clock=lambda: time.time() + offset_s)
    try:
        await lanes.wait_for(lambda: any(r.run_id == run.run_id for r in lanes.runs({run.job_id})), timeout_s=30)
    finally:
        await running.stop()
    [fired] = [r for r in lanes.runs({run.job_id}) if r.run_id == run.run_id]
    assert fired.fire_at_ms == int(due.timestamp() * 1000)


async def test_a_near_run_is_written_to_its_bucket_and_a_cancelled_far_run_is_dropped_by_the_mover(
    dsettings: Settings, store: CassandraStore
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    near = await write_job(
        store, ScheduleDoc(type="once", run_at=(now + timedelta(days=6)).isoformat()), now + timedelta(days=6)
    )
    rows = await store.execute(
        "SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
        [_naive(minute_bucket(near.fire_at)), near.shard],
    )
    assert [r["run_id"] for r in rows] == [near.run_id]

    due = now + timedelta(days=40)
    cancelled = await write_job(store, ScheduleDoc(type="once", run_at=due.isoformat()), due)
    await store.execute("UPDATE runs SET status = 'CANCELLED' WHERE run_id = ?", [cancelled.run_id])
    producer = KafkaProducer(dsettings.kafka)
    try:
        await FarMover(dsettings, CassandraTables(store), producer).move(due - timedelta(days=1))
    finally:
        await producer.close()
    assert not await store.execute(
        "SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
        [_naive(minute_bucket(due)), cancelled.shard],
    )
    assert not await store.execute(
        "SELECT run_id FROM runs_far WHERE day = ? AND shard = ?", [_naive(day_of(due)), cancelled.shard]
    )
