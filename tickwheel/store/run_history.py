"""Reads of a job's run history (`runs_by_job`) that the worker's notifications need."""

from __future__ import annotations

import uuid
from datetime import datetime

from tickwheel.store.cassandra import CassandraStore


async def previous_status(store: CassandraStore, job_id: uuid.UUID, before: datetime) -> str | None:
    """The status of the job's latest run scheduled before `before`, or None when it has none (kept)."""
    rows = await store.execute(
        "SELECT status FROM runs_by_job WHERE job_id = ? AND scheduled_at < ? LIMIT 1", [job_id, before]
    )
    return str(rows[0]["status"]) if rows else None
