"""Reads of a job's run history (`runs_by_job`): the worker's notifications and the coordinator's reconciler."""

from __future__ import annotations

import uuid
from datetime import datetime

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import to_utc


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
    return [at for at in (to_utc(row["scheduled_at"]) for row in rows) if at is not None]
