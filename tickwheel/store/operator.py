"""Reads (and the few counters) behind the operator console: shard owners, due counts, sweeper repairs,
dead letters per tenant. Every query here spans partitions on purpose and is meant for one operator's page,
not for a hot path."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from tickwheel.store import buckets
from tickwheel.store.cassandra import CassandraStore

ADD_COUNTER = "UPDATE operator_counters SET value = value + ? WHERE name = ?"
READ_COUNTERS = "SELECT name, value FROM operator_counters"
COUNT_DEAD_SINCE = "SELECT COUNT(*) AS n FROM dead_letters WHERE tenant_id = ? AND dead_at >= ?"
SWEEPS = "sweeper.sweeps"
REPAIR_PREFIX = "sweeper.repairs."


async def due_per_minute(store: CassandraStore, start: datetime, minutes: int, shards: int) -> list[int]:
    """Rows due in each minute bucket from `start`'s minute on, over every shard (a few COUNTs a minute)."""
    first = start.replace(second=0, microsecond=0)
    return [
        await buckets.count_bucket(store, first + timedelta(minutes=ahead), range(shards)) for ahead in range(minutes)
    ]


async def add_sweep(store: CassandraStore, repairs: Mapping[str, int]) -> None:
    """Count one finished sweep and the repairs it made, by reason."""
    await store.execute(ADD_COUNTER, [1, SWEEPS])
    for reason, count in repairs.items():
        if count:
            await store.execute(ADD_COUNTER, [count, REPAIR_PREFIX + reason])


async def sweeper_counts(store: CassandraStore) -> tuple[int, dict[str, int]]:
    """(sweeps finished, repairs by reason) since the keyspace was made (a scan of a table of a few rows)."""
    found = {row["name"]: int(row["value"]) for row in await store.execute(READ_COUNTERS)}
    repairs = {name.removeprefix(REPAIR_PREFIX): n for name, n in found.items() if name.startswith(REPAIR_PREFIX)}
    return found.get(SWEEPS, 0), repairs


async def dead_letters_since(store: CassandraStore, tenant_id: str, since: datetime) -> int:
    """How many runs of the tenant went dead at or after `since` (one partition, a clustering range)."""
    rows = await store.execute(COUNT_DEAD_SINCE, [tenant_id, since])
    return int(rows[0]["n"]) if rows else 0
