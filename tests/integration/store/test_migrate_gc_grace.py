"""`cassandra.lwt_gc_grace_s`: the migration gives the tables written with LWTs on every run that
gc_grace_seconds, which `paxos_state_purging: gc_grace` also uses as the life of their Paxos state (BENCHMARKS.md
"Cost per run, round 6")."""

from __future__ import annotations

import dataclasses

from tests.conftest import own_keyspace
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.migrate import LWT_TABLES, migrate, set_gc_grace

CASSANDRA_DEFAULT_GRACE = 864000  # 10 days


async def grace_of(store: CassandraStore, keyspace: str) -> dict[str, int]:
    rows = await store.execute(
        "SELECT table_name, gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = %s",
        (keyspace,),
        prepared=False,
    )
    return {row["table_name"]: row["gc_grace_seconds"] for row in rows}


async def test_migrate_gives_the_lwt_tables_the_configured_grace_once(settings: Settings) -> None:
    # As created (0: leave the tables alone), whatever the stack's env says (a fresh stack's nodes purge by
    # gc_grace and its env gives 900 s: the keyspace would be migrated with it before the first look)
    as_created = dataclasses.replace(settings, cassandra=dataclasses.replace(settings.cassandra, lwt_gc_grace_s=0))
    async with own_keyspace(as_created, "grace") as (own, store):
        keyspace = own.cassandra.keyspace
        before = await grace_of(store, keyspace)
        assert {before[t] for t in LWT_TABLES} == {CASSANDRA_DEFAULT_GRACE}  # 0: left as created

        await migrate(dataclasses.replace(own.cassandra, lwt_gc_grace_s=900))

        after = await grace_of(store, keyspace)
        assert {after[t] for t in LWT_TABLES} == {900}
        # the tables whose deletes matter (a released name, a failed create's key) keep the default
        assert after["jobs_by_name"] == after["idempotency_keys"] == CASSANDRA_DEFAULT_GRACE
        assert await set_gc_grace(store, keyspace, LWT_TABLES, 900) == []  # a restarted process changes nothing
