"""The far-horizon table `runs_far`: first attempts due beyond `core.horizon.FAR_AFTER`, by (day, shard),
until the coordinator's mover writes them into their minute buckets (DESIGN.md: retention counted from the due
time; the Dynein / ATF shape: cheap storage for the far future, hot partitions only for the coming days)."""

from __future__ import annotations

from datetime import datetime

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import JobState
from tickwheel.store.ports import ChainStore
from tickwheel.store.records import NewRun, RunStatus
from tickwheel.store.times import bound, read_at

SELECT_DAY = (
    "SELECT fire_at, run_id, job_id, tenant_id, lane, job_version, scheduled_at, tolerance_ms, recurring"
    " FROM runs_far WHERE day = ? AND shard = ?"
)
DELETE_DAY = "DELETE FROM runs_far WHERE day = ? AND shard = ?"


async def read_day(store: CassandraStore, day: datetime, shard: int) -> list[NewRun]:
    """Every run waiting in the (day, shard) partition."""
    rows = await store.execute(SELECT_DAY, [bound(day), shard])
    return [
        NewRun(
            run_id=row["run_id"],
            job_id=row["job_id"],
            tenant_id=row["tenant_id"],
            job_version=row["job_version"],
            shard=shard,
            lane=row["lane"],
            scheduled_at=read_at(row["scheduled_at"]),
            fire_at=read_at(row["fire_at"]),
            tolerance_ms=row["tolerance_ms"] or 0,
            recurring=row["recurring"],
        )
        for row in rows
    ]


async def delete_day(store: CassandraStore, day: datetime, shard: int) -> None:
    """Drop a moved partition whole (one partition tombstone)."""
    await store.execute(DELETE_DAY, [bound(day), shard])


async def move_run(store: ChainStore, run: NewRun, now: datetime) -> bool:
    """Write the bucket row of a run waiting in `runs_far`; True when it will fire. A run cancelled or already
    attempted is left alone; a run whose own row has expired (due beyond Cassandra's 20-year TTL) is written again
    only while its job is ACTIVE and still points at it."""
    current = await store.get_run(run.run_id)
    if current is None:
        job = await store.get_job(run.job_id)
        if job is None or job.state != JobState.ACTIVE or job.next_run_id != run.run_id:
            return False
    elif current.status is not RunStatus.SCHEDULED or current.attempt:
        return False
    await store.create_run(run, now)
    return True
