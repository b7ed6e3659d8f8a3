"""Dead letters: runs that exhausted their attempts or failed permanently, kept per tenant, newest first."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from tickwheel.store.cassandra import CassandraStore


async def add_dead_letter(
    store: CassandraStore,
    *,
    tenant_id: str,
    run_id: uuid.UUID,
    job_id: uuid.UUID,
    target_host: str,
    payload: bytes,
    last_error: str,
    attempts: list[dict[str, Any]],
    dead_at: datetime,
) -> None:
    """Write the dead-letter row and stamp `runs.dead_at` so the letter can be found from its run id."""
    await store.batch(
        [
            (
                "INSERT INTO dead_letters (tenant_id, dead_at, run_id, job_id, target_host, payload, last_error,"
                " attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [tenant_id, dead_at, run_id, job_id, target_host, payload, last_error, json.dumps(attempts)],
            ),
            ("UPDATE runs SET dead_at = ? WHERE run_id = ?", [dead_at, run_id]),
        ],
        logged=True,
    )
