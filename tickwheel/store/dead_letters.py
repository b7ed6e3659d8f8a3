"""Dead letters: runs that exhausted their attempts or failed permanently, kept per tenant, newest first."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.ports import RedriveStore
from tickwheel.store.records import DeadLetter, Run, RunStatus, dead_letter_of
from tickwheel.store.runs import get_run


async def add_dead_letter(
    store: CassandraStore,
    *,
    tenant_id: str,
    run_id: uuid.UUID,
    job_id: uuid.UUID,
    target_host: str,
    payload: bytes,
    last_error: str,
    attempts: Sequence[dict[str, Any]],
    dead_at: datetime,
    ttl_s: int,
    run_retention_s: int = RUN_RETENTION_S,
) -> None:
    """Write the dead-letter row (kept `ttl_s`, the tenant's dead-letter retention) and stamp `runs.dead_at` (kept
    for the tenant's run retention, as the run's other cells) so the letter can be found from its run id."""
    await store.batch(
        [
            (
                "INSERT INTO dead_letters (tenant_id, dead_at, run_id, job_id, target_host, payload, last_error,"
                " attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?",
                [
                    tenant_id,
                    dead_at,
                    run_id,
                    job_id,
                    target_host,
                    payload,
                    last_error,
                    json.dumps(list(attempts)),
                    ttl_s,
                ],
            ),
            ("UPDATE runs USING TTL ? SET dead_at = ? WHERE run_id = ?", [run_retention_s, dead_at, run_id]),
        ],
        logged=True,
    )


async def list_dead_letters(
    store: CassandraStore,
    tenant_id: str,
    *,
    limit: int,
    cursor: str | None = None,
    job_id: uuid.UUID | None = None,
    target_host: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[list[DeadLetter], str | None]:
    """One page of a tenant's dead letters, newest first, filtered; and the cursor of the next page."""
    cql = "SELECT * FROM dead_letters WHERE tenant_id = ?"
    params: list[Any] = [tenant_id]
    for clause, value in (
        ("dead_at >= ?", since),
        ("dead_at < ?", until),
        ("job_id = ?", job_id),
        ("target_host = ?", target_host),
    ):
        if value is not None:
            cql += f" AND {clause}"
            params.append(value)
    if job_id is not None or target_host is not None:
        cql += " ALLOW FILTERING"  # inside the tenant's partition only
    rows, next_cursor = await store.page(cql, params, page_size=limit, cursor=cursor)
    return [dead_letter_of(row) for row in rows], next_cursor


async def get_dead_letter(store: CassandraStore, tenant_id: str, run_id: uuid.UUID) -> DeadLetter | None:
    """The tenant's live dead letter of `run_id` (found through `runs.dead_at`), or None."""
    run = await get_run(store, run_id)
    if run is None or run.tenant_id != tenant_id or run.dead_at is None:
        return None
    rows = await store.execute(
        "SELECT * FROM dead_letters WHERE tenant_id = ? AND dead_at = ? AND run_id = ?",
        [tenant_id, run.dead_at, run_id],
    )
    return dead_letter_of(rows[0]) if rows else None


async def redrive_dead_letter(
    store: RedriveStore, letter: DeadLetter, due_at: datetime, now: datetime, *, job_version: int, retention_s: int
) -> Run | None:
    """Give the dead run one more attempt due at `due_at`, for the job at `job_version`, its rows kept for the
    tenant's run retention `retention_s`; returns the run (as redriven), or None if it is no longer DEAD. Written
    once against the port, so the twin runs this decision."""
    run = await store.get_run(letter.run_id)
    if run is None or run.status is not RunStatus.DEAD:
        return None
    redriven = dataclasses.replace(run.identity(retention_s), job_version=job_version)
    if not await store.redrive_run(redriven, run.attempt, due_at, now):
        return None
    await store.mark_redriven(letter, now)
    return dataclasses.replace(run, job_version=job_version, status=RunStatus.RETRY, due_at=due_at)


async def mark_redriven(store: CassandraStore, letter: DeadLetter, now: datetime) -> None:
    """Stamp the letter with when its run was redriven."""
    await store.execute(
        "UPDATE dead_letters SET redriven_at = ? WHERE tenant_id = ? AND dead_at = ? AND run_id = ?",
        [now, letter.tenant_id, letter.dead_at, letter.run_id],
    )


async def purge_dead_letter(store: CassandraStore, letter: DeadLetter) -> None:
    """Delete the letter. `runs.dead_at` stays (it is when the run died); a lookup by run id then finds no row."""
    await store.execute(
        "DELETE FROM dead_letters WHERE tenant_id = ? AND dead_at = ? AND run_id = ?",
        [letter.tenant_id, letter.dead_at, letter.run_id],
    )
