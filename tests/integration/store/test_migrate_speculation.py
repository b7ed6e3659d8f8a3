"""Migration 0009: every table the platform reads at QUORUM asks a third replica after at most 50 ms
(schemas/cql/0009_read_speculation.cql), a table added later included."""

from __future__ import annotations

from tests.conftest import own_keyspace
from tickwheel.settings import Settings

SPECULATION = "MIN(99p,50ms)"


async def test_every_table_migrated_speculates_no_later_than_50_ms(settings: Settings) -> None:
    async with own_keyspace(settings, "speculation") as (own, store):
        rows = await store.execute(
            "SELECT table_name, speculative_retry FROM system_schema.tables WHERE keyspace_name = %s",
            (own.cassandra.keyspace,),
            prepared=False,
        )
        by_table = {row["table_name"]: row["speculative_retry"] for row in rows}
        by_table.pop("schema_migrations")  # the migrator's own ledger, read once per start
        assert len(by_table) >= 19
        assert {table: value for table, value in by_table.items() if value != SPECULATION} == {}
