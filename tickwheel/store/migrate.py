"""Versioned CQL migrations from schemas/cql: applied in order, each once, recorded in `schema_migrations`."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import NamedTuple

from tickwheel.settings import CassandraSettings
from tickwheel.store.cassandra import CassandraStore

log = logging.getLogger(__name__)
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.cql$")


class Migration(NamedTuple):
    """One `schemas/cql/NNNN_name.cql` file: its number, name and statements."""

    version: int
    name: str
    statements: list[str]


def load_migrations() -> list[Migration]:
    """Every migration file shipped in the `schemas` package, in version order."""
    found = []
    for entry in resources.files("schemas").joinpath("cql").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], split_statements(entry.read_text())))
    found.sort()
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two migrations share a version: {versions}")
    return found


def split_statements(text: str) -> list[str]:
    """Statements end with ';' at the end of a line; '--' comment lines are dropped."""
    lines = [line for line in text.splitlines() if not line.strip().startswith("--")]
    parts = re.split(r";\s*$", "\n".join(lines), flags=re.MULTILINE)
    return [part.strip() for part in parts if part.strip()]


async def migrate(settings: CassandraSettings) -> list[int]:
    """Create the keyspace if needed and apply pending migrations; returns the versions applied now."""
    admin = await CassandraStore.connect(settings, keyspace=False)
    try:
        await admin.execute_raw(
            f"CREATE KEYSPACE IF NOT EXISTS {settings.keyspace} WITH replication = {settings.replication}"
        )
        await admin.execute_raw(
            f"CREATE TABLE IF NOT EXISTS {settings.keyspace}.schema_migrations "
            "(version int PRIMARY KEY, name text, applied_at timestamp)"
        )
    finally:
        await admin.close()
    store = await CassandraStore.connect(settings)
    try:
        applied = await _apply_pending(store)
        if settings.lwt_gc_grace_s > 0:
            await set_gc_grace(store, settings.keyspace, LWT_TABLES, settings.lwt_gc_grace_s)
        return applied
    finally:
        await store.close()


async def drop_keyspace(settings: CassandraSettings) -> None:
    """Drop `settings.keyspace` and everything in it (a test run's or a benchmark platform's, when it ends)."""
    admin = await CassandraStore.connect(settings, keyspace=False)
    try:
        await admin.execute_raw(f"DROP KEYSPACE IF EXISTS {settings.keyspace}")
    finally:
        await admin.close()


# The tables every delivered run writes with LWTs (the create, the claim, the outcome; the checkpoints of its
# shard). Their gc_grace_seconds bounds how long `paxos_state_purging: gc_grace` keeps each LWT's Paxos state; the
# tables whose deletes matter more than their rare LWTs (jobs_by_name, idempotency_keys) keep Cassandra's default.
LWT_TABLES = ("jobs", "runs", "shard_checkpoints")


async def set_gc_grace(store: CassandraStore, keyspace: str, tables: Sequence[str], seconds: int) -> list[str]:
    """Give `tables` this gc_grace_seconds where they have another; returns the tables altered (a schema change
    each, so a process that starts on a migrated keyspace changes nothing)."""
    rows = await store.execute(
        "SELECT table_name, gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = %s",
        (keyspace,),
        prepared=False,
    )
    current = {row["table_name"]: row["gc_grace_seconds"] for row in rows}
    altered = [table for table in tables if current.get(table) != seconds]
    for table in altered:
        log.info("setting gc_grace_seconds of %s.%s to %d", keyspace, table, seconds)
        await store.execute_raw(f"ALTER TABLE {keyspace}.{table} WITH gc_grace_seconds = {int(seconds)}")
    return altered


async def _apply_pending(store: CassandraStore) -> list[int]:
    rows = await store.execute("SELECT version FROM schema_migrations", prepared=False)
    done = {row["version"] for row in rows}
    applied = []
    for migration in load_migrations():
        if migration.version in done:
            continue
        log.info("applying migration %04d_%s", migration.version, migration.name)
        for statement in migration.statements:
            await store.execute_raw(statement)
        await store.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
            (migration.version, migration.name, datetime.now(UTC)),
            prepared=False,
        )
        applied.append(migration.version)
    return applied
