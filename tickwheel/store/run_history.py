"""Reads of a job's run history (`runs_by_job`): the worker's notifications and the coordinator's reconciler."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import FINAL, HistoryEntry, history_entry_of
from tickwheel.store.times import bound, read_at


async def previous_status(store: CassandraStore, job_id: uuid.UUID, before: datetime) -> str | None:
    """The status of the job's latest run scheduled before `before`, or None when it has none (kept)."""
    rows = await store.execute(
        "SELECT status FROM runs_by_job WHERE job_id = ? AND scheduled_at < ? LIMIT 1", [job_id, before]
    )
    return str(rows[0]["status"]) if rows else None


async def scheduled_between(
    store: CassandraStore, job_id: uuid.UUID, after: datetime, until: datetime
) -> list[datetime]:
    """The occurrences (`scheduled_at`) the job has a run for in (after, until], newest first."""
    rows = await store.execute(
        "SELECT scheduled_at FROM runs_by_job WHERE job_id = ? AND scheduled_at > ? AND scheduled_at <= ?",
        [job_id, after, until],
    )
    return [read_at(row["scheduled_at"]) for row in rows]


async def latest(store: CassandraStore, job_id: uuid.UUID, limit: int) -> list[HistoryEntry]:
    """The job's newest `limit` history entries (run_id, scheduled_at, status, attempt), newest first."""
    rows = await store.execute(
        "SELECT run_id, scheduled_at, status, attempt FROM runs_by_job WHERE job_id = ? LIMIT ?", [job_id, limit]
    )
    return [history_entry_of(row) for row in rows]


async def page_of_job(
    store: CassandraStore, job_id: uuid.UUID, status: str | None, *, page_size: int, cursor: str | None
) -> tuple[list[HistoryEntry], str | None]:
    """One page of the job's history, newest first, optionally of one status (filtered inside the partition)."""
    cql = "SELECT * FROM runs_by_job WHERE job_id = ?"
    params: list[Any] = [job_id]
    if status is not None:
        cql += " AND status = ? ALLOW FILTERING"  # inside the job's partition only
        params.append(status)
    rows, next_cursor = await store.page(cql, params, page_size=page_size, cursor=cursor)
    return [history_entry_of(row) for row in rows], next_cursor


EARLIER_RUNS = "SELECT run_id, status FROM runs_by_job WHERE job_id = ? AND scheduled_at < ? LIMIT ?"
RUN_STATUSES = "SELECT run_id, status FROM runs WHERE run_id IN ?"
EARLIER_RUNS_READ = 50
"""How many earlier occurrences the overlap check looks at (newest first)."""


async def earlier_in_flight(store: CassandraStore, job_id: uuid.UUID, before: datetime) -> int:
    """How many of the job's latest runs scheduled before `before` are not final (read from the run rows: the
    history may still say SCHEDULED of a run that started)."""
    rows = await store.execute(EARLIER_RUNS, [job_id, bound(before), EARLIER_RUNS_READ])
    candidates = [row["run_id"] for row in rows if row["status"] not in FINAL]
    if not candidates:
        return 0
    runs = await store.execute(RUN_STATUSES, [candidates])
    return sum(1 for row in runs if row["status"] not in FINAL)
