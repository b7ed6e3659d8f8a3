"""A tenant's job names (`jobs_by_name`): each name points at one job, claimed and moved only by LWT.

A name is claimed before its job is written (`claim`), so of two racing creates only one proceeds. A name whose
job was never written (the creator died) or was deleted is moved to a new job with `move`, conditioned on the
job it pointed at, so two racing replacements cannot both win.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.times import aware


@dataclass(frozen=True, slots=True)
class NameClaim:
    """Where a name points, and since when (a claim whose job is not written yet may be a create in progress)."""

    job_id: uuid.UUID
    claimed_at: datetime | None


async def claim_of(store: CassandraStore, tenant_id: str, name: str) -> NameClaim | None:
    """The tenant's claim on `name`, if any."""
    rows = await store.execute(
        "SELECT job_id, claimed_at FROM jobs_by_name WHERE tenant_id = ? AND name = ?", [tenant_id, name]
    )
    return NameClaim(rows[0]["job_id"], aware(rows[0]["claimed_at"])) if rows else None


async def claim(store: CassandraStore, tenant_id: str, name: str, job_id: uuid.UUID, now: datetime) -> bool:
    """Point an unused name at `job_id`; False when the name is taken."""
    applied, _ = await store.applied(
        "INSERT INTO jobs_by_name (tenant_id, name, job_id, claimed_at) VALUES (?, ?, ?, ?) IF NOT EXISTS",
        [tenant_id, name, job_id, now],
    )
    return applied


async def move(store: CassandraStore, tenant_id: str, name: str, old: uuid.UUID, new: uuid.UUID, now: datetime) -> bool:
    """Point the name from `old` to `new`; False when it no longer points at `old`."""
    applied, _ = await store.applied(
        "UPDATE jobs_by_name SET job_id = ?, claimed_at = ? WHERE tenant_id = ? AND name = ? IF job_id = ?",
        [new, now, tenant_id, name, old],
    )
    return applied


async def release(store: CassandraStore, tenant_id: str, name: str, job_id: uuid.UUID) -> None:
    """Free the name if it still points at `job_id` (a create that failed after claiming it)."""
    await store.applied(
        "DELETE FROM jobs_by_name WHERE tenant_id = ? AND name = ? IF job_id = ?", [tenant_id, name, job_id]
    )
