"""A Cassandra that cannot be reached while a statement is prepared for the first time is `Unavailable`
(503, retriable), as it is for a statement already prepared, never a driver exception that becomes a 500.
The store reaches the shared Cassandra through a TCP proxy this test owns and cuts."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from tests.integration.api.proxies import TcpProxy
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore


def cassandra_proxy(settings: Settings) -> tuple[TcpProxy, tuple[str]]:
    """A proxy in front of the stack's Cassandra, on the node's own address (see `TcpProxy`), and the hosts to give."""
    host, _, port = settings.cassandra.hosts[0].rpartition(":")
    host = host or "127.0.0.1"
    proxy = TcpProxy(host, int(port), listen_host=host).start()
    return proxy, (f"{host}:{proxy.port}",)


async def test_a_first_prepare_against_an_unreachable_cassandra_is_unavailable(settings: Settings) -> None:
    proxy, hosts = cassandra_proxy(settings)
    store = await CassandraStore.connect(dataclasses.replace(settings.cassandra, hosts=hosts, request_timeout_s=2.0))
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


async def test_a_cassandra_back_after_a_long_outage_is_used_again_within_seconds(settings: Settings) -> None:
    """The driver's default reconnection backoff grows to 600 s: after 40 s of outage its next attempt was half a
    minute or more after the server was back (the nemesis soak saw 8 minutes of 503s). With `reconnect_max_s` the
    store answers again a few seconds after the server does."""
    proxy, hosts = cassandra_proxy(settings)
    store = await CassandraStore.connect(dataclasses.replace(settings.cassandra, hosts=hosts, request_timeout_s=2.0))
    try:
        assert await store.execute("SELECT release_version FROM system.local")
        proxy.cut()
        outage_ends = time.monotonic() + 40
        while time.monotonic() < outage_ends:  # keep asking, as the processes do, while the backoff grows
            with pytest.raises(Unavailable):
                await store.execute("SELECT release_version FROM system.local")
            await asyncio.sleep(1.0)
        proxy.restore()
        back = time.monotonic()
        while True:
            try:
                await store.execute("SELECT release_version FROM system.local")
                break
            except Unavailable:
                # generous for a loaded box: the old backoff's next attempt came 20-60 s after the restore
                assert time.monotonic() - back < 15, "the store did not use the returned server within 15 s"
                await asyncio.sleep(0.5)
    finally:
        await store.close()
        proxy.close()
