"""The sweeper repairs runs that started or failed and were left with nothing to fire them again (issue 11.2):
RUNNING past the lease with no lease check row, RETRY past the retry time with no run row. (The pass finds them
through the due rows of the minutes past their grace: here the run is named to it, as its row at its due minute
would.)"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from coordinator.sweeper import MARK, Repair, Sweeper
from tests.conftest import own_keyspace
from tests.factories import definition, job
from tests.integration.dispatch.conftest import write_interval_job
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.bus.memory import MemoryBus
from tickwheel.core.ids import minute_bucket
from tickwheel.settings import Settings
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tables import CassandraTables


async def bucket_rows(store: CassandraStore, run: runs.NewRun, at: datetime) -> set[tuple[int, str]]:
    rows = await store.execute(
        "SELECT run_id, attempt, kind FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
        [minute_bucket(at).replace(tzinfo=None), run.shard],
    )
    return {(r["attempt"], r["kind"]) for r in rows if r["run_id"] == run.run_id}


async def sweep_run(
    dsettings: Settings, store: CassandraStore, job_id: uuid.UUID, run: runs.NewRun, now: datetime
) -> list[Repair]:
    producer = KafkaProducer(dsettings.kafka)
    try:
        return await Sweeper(dsettings, CassandraTables(store), producer).check_runs({run.run_id: job_id}, now)
    finally:
        await producer.close()


async def test_a_run_running_past_its_lease_with_no_lease_check_gets_one_now(
    store: CassandraStore, dsettings: Settings
) -> None:
    now = datetime.now(UTC)
    due = (now - timedelta(minutes=30)).replace(microsecond=0)
    job_id, run = await write_interval_job(store, due, every_s=3600)
    lease_until = due + timedelta(minutes=1)
    assert (await runs.claim(store, run, 0, "gone", lease_until, due)).applied
    await store.execute(  # the lease check row is lost (what a failed index write after the LWT left)
        "DELETE FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
        [minute_bucket(lease_until).replace(tzinfo=None), run.shard],
    )
    assert await sweep_run(dsettings, store, job_id, run, now) == [Repair.LEASE_LAPSED]
    assert (1, "lease_check") in await bucket_rows(store, run, now)


async def test_a_retry_past_its_time_that_never_fired_is_fired_now_once(
    store: CassandraStore, dsettings: Settings
) -> None:
    now = datetime.now(UTC)
    due = (now - timedelta(minutes=30)).replace(microsecond=0)
    job_id, run = await write_interval_job(store, due, every_s=3600)
    assert (await runs.claim(store, run, 0, "w", due + timedelta(minutes=1), due)).applied
    await store.execute(  # RETRY with no run row at its retry time
        "UPDATE runs SET status = 'RETRY', due_at = ?, lease_until = null WHERE run_id = ?",
        [(due + timedelta(minutes=2)).replace(tzinfo=None), run.run_id],
    )
    assert await sweep_run(dsettings, store, job_id, run, now) == [Repair.RETRY_UNFIRED]
    assert (1, "run") in await bucket_rows(store, run, now)
    [row] = await store.execute("SELECT due_at FROM runs WHERE run_id = ?", [run.run_id])
    assert row["due_at"] >= now.replace(tzinfo=None, microsecond=0)
    assert await sweep_run(dsettings, store, job_id, run, now) == []  # moved to now: not repaired again


async def test_runs_that_finished_or_wait_inside_their_lease_are_left_alone(
    store: CassandraStore, dsettings: Settings
) -> None:
    now = datetime.now(UTC)
    due = (now - timedelta(minutes=30)).replace(microsecond=0)
    job_id, run = await write_interval_job(store, due, every_s=3600)
    assert (await runs.claim(store, run, 0, "w", now + timedelta(minutes=5), due)).applied
    assert await sweep_run(dsettings, store, job_id, run, now) == []
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.SUCCEEDED), "w", due, now)
    assert await sweep_run(dsettings, store, job_id, run, now + timedelta(hours=1)) == []


async def test_a_whole_pass_on_cassandra_finds_a_stranded_run_through_its_minutes_due_rows(settings: Settings) -> None:
    """The pass itself on a keyspace of its own: the minute's due rows name the runs, a settled one is left alone,
    a stranded one is repaired, and the mark moves past the minutes read."""
    now = datetime.now(UTC)
    due = (now - timedelta(minutes=10)).replace(microsecond=0)
    async with own_keyspace(settings, "sweepmin") as (own, store):
        tables = CassandraTables(store)
        await tables.mark_swept(MARK, due - timedelta(minutes=2))
        (settled_job, settled), (stranded_job, stranded) = (
            job(due, job_definition=definition(every_s=None, anchor=due)) for _ in range(2)
        )
        lease_until = due + timedelta(minutes=1)
        for made, run in ((settled_job, settled), (stranded_job, stranded)):
            await tables.create_job(made, run, due - timedelta(hours=1))
            assert (await tables.claim(run, 0, "w", lease_until, due)).applied
        result = runs.AttemptResult(runs.RunStatus.SUCCEEDED)
        assert await tables.finish(settled, 1, result, "w", due, due + timedelta(seconds=1), lease_until)
        await store.execute(  # the stranded run's lease check row is lost; its own row at `due` is still there
            "DELETE FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
            [minute_bucket(lease_until).replace(tzinfo=None), stranded.shard],
        )
        assert await Sweeper(own, tables, MemoryBus()).sweep(now) == {Repair.LEASE_LAPSED: 1}
        assert (1, "lease_check") in await bucket_rows(store, stranded, now)
        assert await tables.swept_through(MARK) == minute_bucket(now - timedelta(seconds=own.coordinator.sweep_grace_s))
