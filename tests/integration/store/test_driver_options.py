"""How the store's driver talks to Cassandra (issue 14, round 3: measured in benchmarks/cql_cost.py)."""

from __future__ import annotations

from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore


async def test_cql_frames_are_not_compressed_and_protocol_v5_is_used(settings: Settings) -> None:
    store = await CassandraStore.connect(settings.cassandra)
    try:
        assert store._cluster.compression is False  # small frames: compressing them cost the driver CPU
        assert store._cluster.protocol_version == 5  # v4 cost Cassandra more per run
        rows = await store.execute("SELECT release_version FROM system.local")
        assert rows and rows[0]["release_version"]
    finally:
        await store.close()


async def test_the_comparison_options_reach_the_driver(settings: Settings) -> None:
    options = {"compression": "true", "protocol_version": "4", "token_aware": "false"}
    store = await CassandraStore.connect(settings.cassandra, driver_options=options)
    try:
        assert store._cluster.compression is True
        assert store._cluster.protocol_version == 4
        assert (await store.execute("SELECT release_version FROM system.local"))[0]["release_version"]
    finally:
        await store.close()
