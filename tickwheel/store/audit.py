"""The audit log of job changes (`job_history`): who changed a job, when, to which version, and what changed.

Rows are written after the change they record (a row for a change that never applied would be a lie), with the
tenant's retention as their TTL, and read newest first, a page at a time.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from cassandra.util import uuid_from_time

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.times import aware, read_at

_JSON = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class JobChangeRecord:
    """One change to a job, as the audit log keeps it."""

    job_id: uuid.UUID
    tenant_id: str
    changed_at: datetime
    version: int
    action: str  # create | edit | pause | resume | delete | trigger | backfill | redrive
    key_id: str | None
    diff: list[dict[str, Any]]
    detail: dict[str, Any]
    change_id: uuid.UUID | None = None


INSERT_CHANGE = (
    "INSERT INTO job_history (job_id, change_id, tenant_id, changed_at, version, action, key_id, diff, detail)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
)


def change_row(change: JobChangeRecord, ttl_s: int) -> tuple[str, list[Any]]:
    """The statement appending `change` to the job's log, kept `ttl_s` (to run alone or in a create's batch)."""
    change_id = change.change_id or uuid_from_time(change.changed_at)
    values = [
        change.job_id,
        change_id,
        change.tenant_id,
        change.changed_at,
        change.version,
        change.action,
        change.key_id,
        _JSON.encode(change.diff).decode(),  # msgspec: a create's diff is its whole definition, written per create
        _JSON.encode(change.detail).decode(),
        ttl_s,
    ]
    return INSERT_CHANGE, values


async def record_change(store: CassandraStore, change: JobChangeRecord, ttl_s: int) -> uuid.UUID:
    """Append one change to the job's log, kept `ttl_s`; returns its change id."""
    change_id = change.change_id or uuid_from_time(change.changed_at)
    await store.execute(*change_row(dataclasses.replace(change, change_id=change_id), ttl_s))
    return change_id


async def job_changes(
    store: CassandraStore, job_id: uuid.UUID, *, limit: int, cursor: str | None = None
) -> tuple[list[JobChangeRecord], str | None]:
    """One page of the job's changes, newest first, and the cursor of the next page."""
    rows, next_cursor = await store.page(
        "SELECT * FROM job_history WHERE job_id = ?", [job_id], page_size=limit, cursor=cursor
    )
    changes = [
        JobChangeRecord(
            job_id=row["job_id"],
            tenant_id=row["tenant_id"],
            changed_at=read_at(row["changed_at"]),
            version=row["version"],
            action=row["action"],
            key_id=row["key_id"],
            diff=json.loads(row["diff"] or "[]"),
            detail=json.loads(row["detail"] or "{}"),
            change_id=row["change_id"],
        )
        for row in rows
    ]
    return changes, next_cursor


async def version_started_at(store: CassandraStore, job_id: uuid.UUID, version: int) -> datetime | None:
    """When the job reached `version` (the change that made it), if the audit log still holds it."""
    rows = await store.execute("SELECT changed_at, version FROM job_history WHERE job_id = ? LIMIT 200", [job_id])
    made = [aware(row["changed_at"]) for row in rows if row["version"] == version]
    return min((at for at in made if at is not None), default=None)
