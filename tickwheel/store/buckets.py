"""Reading `runs_by_bucket`: one (minute bucket, shard) partition, or a group of shards of one minute bucket in
one `shard IN ?` read (the dispatchers' scans), paged, between two instants.

Rows come back as `schemas.messages.DueRun` (the shape firing needs), so callers never see driver rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from schemas.messages import DueRun, RunKind
from tickwheel import metrics
from tickwheel.core.instants import epoch_ms, from_epoch_ms, whole_ms
from tickwheel.errors import Unavailable
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import DueKey, NewRun, Row, carries_definition
from tickwheel.store.times import bound, read_at

MINUTE = timedelta(minutes=1)
T = TypeVar("T")
SELECT_RANGE = (
    "SELECT fire_at, run_id, attempt, kind, job_id, tenant_id, lane, job_version, scheduled_at, tolerance_ms,"
    " recurring, definition"
    " FROM runs_by_bucket WHERE bucket = ? AND shard = ? AND fire_at >= ? AND fire_at < ?"
)
SELECT_SHARDS = (
    "SELECT shard, fire_at, run_id, attempt, kind, job_id, tenant_id, lane, job_version, scheduled_at, tolerance_ms,"
    " recurring, definition"
    " FROM runs_by_bucket WHERE bucket = ? AND shard IN ? AND fire_at >= ? AND fire_at < ?"
)
SELECT_KEYS = (  # the rescans' and the sweeper's: a third of the columns, no definition (up to 4 KiB a row)
    "SELECT shard, fire_at, run_id, attempt, kind, job_id"
    " FROM runs_by_bucket WHERE bucket = ? AND shard IN ? AND fire_at >= ? AND fire_at < ?"
)
COUNT_SHARDS = "SELECT COUNT(*) AS n FROM runs_by_bucket WHERE bucket = ? AND shard IN ?"


def due_run_of(row: Row, shard: int) -> DueRun:
    """A bucket row as the message fired for it."""
    return DueRun(
        run_id=row["run_id"],
        job_id=row["job_id"],
        tenant_id=row["tenant_id"],
        shard=shard,
        attempt=row["attempt"],
        kind=row["kind"],
        lane=row["lane"] or "default",
        job_version=row["job_version"] or 0,
        scheduled_at_ms=epoch_ms(read_at(row["scheduled_at"] or row["fire_at"])),
        fire_at_ms=epoch_ms(read_at(row["fire_at"])),
        tolerance_ms=row["tolerance_ms"] or 0,
        recurring=row.get("recurring"),
        definition=row.get("definition"),
    )


def due_key_of(row: Row, shard: int) -> DueKey:
    """A bucket row's name (`SELECT_KEYS`)."""
    return DueKey(
        shard=shard,
        run_id=row["run_id"],
        attempt=row["attempt"],
        kind=row["kind"],
        fire_at_ms=epoch_ms(read_at(row["fire_at"])),
        job_id=row["job_id"],
    )


def due_run_for(run: NewRun, *, attempt: int = 0, kind: RunKind = "run", fire_at: datetime | None = None) -> DueRun:
    """The message the bucket row of (run, attempt, kind) at `fire_at` (default: the run's) fires as (with the job's
    definition when the row carries it: `runs.carries_definition`)."""
    fire_at = fire_at or run.fire_at
    return DueRun(
        run_id=run.run_id,
        job_id=run.job_id,
        tenant_id=run.tenant_id,
        shard=run.shard,
        attempt=attempt,
        kind=kind,
        lane=run.lane,  # type: ignore[arg-type]
        job_version=run.job_version,
        scheduled_at_ms=epoch_ms(run.scheduled_at),
        fire_at_ms=epoch_ms(whole_ms(fire_at)),
        tolerance_ms=run.tolerance_ms,
        recurring=run.recurring,
        definition=run.definition if carries_definition(run, attempt, kind) else None,
    )


def run_of_due(due: DueRun) -> NewRun:
    """The identity of the run a fired row names (what the worker writes its rows with), due at its row's time."""
    return NewRun(
        run_id=due.run_id,
        job_id=due.job_id,
        tenant_id=due.tenant_id,
        job_version=due.job_version,
        shard=due.shard,
        lane=due.lane,
        scheduled_at=from_epoch_ms(due.scheduled_at_ms),
        fire_at=from_epoch_ms(due.fire_at_ms),
        tolerance_ms=due.tolerance_ms,
        recurring=due.recurring,
    )


async def read_partition(
    store: CassandraStore,
    bucket: datetime,
    shard: int,
    since: datetime,
    until: datetime,
    *,
    page_size: int = 1000,
) -> AsyncIterator[list[DueRun]]:
    """Pages of the rows of partition (bucket, shard) with since <= fire_at < until."""
    params = [bound(bucket), shard, bound(since), bound(until)]
    cursor: str | None = None
    while True:
        rows, cursor = await store.page(SELECT_RANGE, params, page_size=page_size, cursor=cursor)
        if rows:
            yield [due_run_of(row, shard) for row in rows]
        if cursor is None:
            return


async def read_range(
    store: CassandraStore, shard: int, since: datetime, until: datetime, *, page_size: int = 1000
) -> list[DueRun]:
    """Every row of `shard` with since <= fire_at < until, across the minute buckets in between."""
    found: list[DueRun] = []
    for bucket in minutes_between(since, until):
        async for page in read_partition(store, bucket, shard, since, until, page_size=page_size):
            found.extend(page)
    return found


async def read_shards(
    store: CassandraStore, shards: Collection[int], since: datetime, until: datetime, *, page_size: int = 1000
) -> list[DueRun]:
    """Every row of `shards` with since <= fire_at < until: one `shard IN ?` read (paged) per minute bucket for
    the whole group, where `read_range` makes one per shard. Callers keep groups small (a few dozen shards): the
    coordinator of the read waits for every partition of it."""
    return await _read_group(store, SELECT_SHARDS, due_run_of, shards, since, until, page_size)


async def read_keys(
    store: CassandraStore, shards: Collection[int], since: datetime, until: datetime, *, page_size: int = 1000
) -> list[DueKey]:
    """The names of the rows `read_shards` would return."""
    return await _read_group(store, SELECT_KEYS, due_key_of, shards, since, until, page_size)


async def _read_group(
    store: CassandraStore,
    query: str,
    convert: Callable[[Row, int], T],
    shards: Collection[int],
    since: datetime,
    until: datetime,
    page_size: int,
) -> list[T]:
    asked = set(shards)
    found: list[T] = []
    for bucket in minutes_between(since, until):
        params = [bound(bucket), sorted(asked), bound(since), bound(until)]
        cursor: str | None = None
        while True:
            rows, cursor = await store.page(query, params, page_size=page_size, cursor=cursor)
            found.extend(convert(row, _asked_shard(row, asked)) for row in rows)
            if cursor is None:
                break
    return found


def _asked_shard(row: Row, asked: set[int]) -> int:
    """The row's shard, which must be one the read asked for (`CassandraStore` checks `column = ?` keys only: a
    crossed answer of another group's read has the same shape)."""
    shard = int(row["shard"])
    if shard not in asked:
        metrics.backend_errors.labels("cassandra").inc()
        raise Unavailable(f"Cassandra answered a due row of shard {shard}, which was not asked for; try again")
    return shard


def minutes_between(since: datetime, until: datetime) -> list[datetime]:
    """The minute buckets overlapping [since, until)."""
    bucket = since.replace(second=0, microsecond=0)
    buckets = []
    while bucket < until:
        buckets.append(bucket)
        bucket += MINUTE
    return buckets


async def count_bucket(store: CassandraStore, bucket: datetime, shards: Sequence[int], *, chunk: int = 128) -> int:
    """How many rows the minute `bucket` holds over `shards` (a few multi-partition COUNTs)."""
    total = 0
    shard_list = list(shards)
    for start in range(0, len(shard_list), chunk):
        rows = await store.execute(COUNT_SHARDS, [bound(bucket), shard_list[start : start + chunk]])
        total += int(rows[0]["n"]) if rows else 0
    return total
