"""What the coordinator's sweeper reads besides the due rows: the index of recurring jobs (`jobs_recurring`, in
PARTS partitions by the job's shard) and how far it has swept the minute buckets (`sweep_marks`). The reconciler
reads the same index, a page at a time (`recurring_page`).

A recurring job's row is written before the job's own conditional write that makes it recurring (`recurring_row`
goes into the job's create or update), so a recurring job is never without it: the sweeper finds a missing next
run through it, which no due row can show. It is dropped at the write time of the job version the sweeper read, so
a job made recurring again after that read keeps the row written for it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import Job
from tickwheel.store.times import aware, bound, epoch_us

PARTS = 16
"""The index's partitions: few, so that an empty or small index costs a pass a few reads, not one per shard."""
INSERT_RECURRING = "INSERT INTO jobs_recurring (part, job_id) VALUES (?, ?)"
SELECT_RECURRING = "SELECT job_id FROM jobs_recurring WHERE part = ?"
DELETE_RECURRING = "DELETE FROM jobs_recurring USING TIMESTAMP ? WHERE part = ? AND job_id = ?"


def part_of(shard: int) -> int:
    """The index partition of a job of `shard`."""
    return shard % PARTS


SELECT_MARK = "SELECT swept_through FROM sweep_marks WHERE name = ?"
UPDATE_MARK = "UPDATE sweep_marks SET swept_through = ? WHERE name = ?"


def recurring_row(job: Job) -> tuple[str, list[Any]]:
    """The job's `jobs_recurring` row."""
    return INSERT_RECURRING, [part_of(job.shard), job.job_id]


async def mark_recurring(store: CassandraStore, job: Job) -> None:
    """Write the job's `jobs_recurring` row (safe to write again)."""
    await store.execute(*recurring_row(job))


async def mark_all_recurring(store: CassandraStore, jobs: Sequence[Job]) -> None:
    """Write the `jobs_recurring` rows of `jobs` together: one unlogged batch per index partition (a batch inside
    one partition is one mutation: no batchlog, and all of its rows or none), the partitions' batches at once."""
    by_part: dict[int, list[tuple[str, list[Any]]]] = {}
    for job in jobs:
        by_part.setdefault(part_of(job.shard), []).append(recurring_row(job))
    await asyncio.gather(*(store.batch(rows, logged=False) for rows in by_part.values()))


async def recurring_page(
    store: CassandraStore, part: int, *, page_size: int, cursor: str | None
) -> tuple[list[uuid.UUID], str | None]:
    """One page of the ids in the index's partition `part`, and the cursor of the next (None: the last)."""
    rows, following = await store.page(SELECT_RECURRING, [part], page_size=page_size, cursor=cursor)
    return [row["job_id"] for row in rows], following


async def recurring_jobs(store: CassandraStore, part: int, *, page_size: int = 1000) -> list[uuid.UUID]:
    """The ids in the index's partition `part` (paged)."""
    found: list[uuid.UUID] = []
    cursor: str | None = None
    while True:
        ids, cursor = await recurring_page(store, part, page_size=page_size, cursor=cursor)
        found.extend(ids)
        if cursor is None:
            return found


async def forget_recurring(store: CassandraStore, job: Job) -> None:
    """Drop the job's row as of the job version read (its `updated_at`): a row written since (the job made
    recurring again) is newer and stays."""
    await store.execute(DELETE_RECURRING, [epoch_us(job.updated_at), part_of(job.shard), job.job_id])


async def swept_through(store: CassandraStore, name: str) -> datetime | None:
    """The first minute sweeper `name` has not swept yet (None: it never swept)."""
    rows = await store.execute(SELECT_MARK, [name])
    return aware(rows[0]["swept_through"]) if rows else None


async def mark_swept(store: CassandraStore, name: str, through: datetime) -> None:
    """Every minute before `through` is swept."""
    await store.execute(UPDATE_MARK, [bound(through), name])
