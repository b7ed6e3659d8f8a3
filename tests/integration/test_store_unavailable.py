"""A Cassandra that cannot be reached while a statement is prepared for the first time is `Unavailable`
(503, retriable), as it is for a statement already prepared, never a driver exception that becomes a 500.
The store reaches the shared Cassandra through a TCP proxy this test owns and cuts."""

from __future__ import annotations

import dataclasses

import pytest

from tests.integration.api.proxies import TcpProxy
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore


async def test_a_first_prepare_against_an_unreachable_cassandra_is_unavailable(settings: Settings) -> None:
    host, _, port = settings.cassandra.hosts[0].rpartition(":")
    proxy = TcpProxy(host or "127.0.0.1", int(port)).start()
    store = await CassandraStore.connect(
        dataclasses.replace(settings.cassandra, hosts=(f"127.0.0.1:{proxy.port}",), request_timeout_s=2.0)
    )
    try:
        assert await store.execute("SELECT release_version FROM system.local")
        proxy.cut()
        with pytest.raises(Unavailable):
            await store.execute("SELECT release_version FROM system.local")  # prepared before the cut
        with pytest.raises(Unavailable):
            await store.execute("SELECT cluster_name FROM system.local")  # never prepared
        proxy.restore()
    finally:
        await store.close()
        proxy.close()
