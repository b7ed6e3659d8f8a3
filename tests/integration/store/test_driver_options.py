"""How the store's driver talks to Cassandra (issue 14, round 3: measured in benchmarks/cql_cost.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import socket
import threading
import uuid

import pytest

from tickwheel.errors import SettingsError
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.loop_io import LoopConnection

NO_SUCH_ROW = "SELECT shard FROM shard_checkpoints WHERE shard = ?"
NO_SUCH_CHECKPOINT = "UPDATE shard_checkpoints SET owner = ? WHERE shard = ? IF owner_epoch = 0"


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


async def test_connections_served_by_the_loop_answer_on_it_and_start_no_io_thread(settings: Settings) -> None:
    before = {thread.name for thread in threading.enumerate()}
    store = await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io="loop"))
    try:
        assert issubclass(store._cluster.connection_class, LoopConnection)
        answers = await asyncio.gather(*(store.execute(NO_SUCH_ROW, [n]) for n in range(200)))
        assert answers == [[]] * 200  # many in flight at once, each answered with its own (empty) rows
        assert (await store.execute("SELECT release_version FROM system.local"))[0]["release_version"]
        started = {thread.name for thread in threading.enumerate()} - before
        assert not any("libev" in name.lower() or "event_loop" in name.lower() for name in started), started
    finally:
        await store.close()


async def test_an_unknown_driver_io_is_refused(settings: Settings) -> None:
    with pytest.raises(SettingsError, match="DRIVER_IO"):
        await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io="threads"))


@pytest.mark.parametrize("driver_io", ["libev", "loop"])
async def test_a_request_leaves_nothing_for_the_cyclic_collector(settings: Settings, driver_io: str) -> None:
    """Each request's objects go when it is answered (by reference counting): the driver's future kept its timer,
    whose callback is the future, and our callbacks kept the awaited future and its rows, ~34 objects a request
    in cycles that cost the worker ~14 % of its CPU to collect (tickwheel/heap.py)."""
    store = await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io=driver_io))
    try:
        await _requests_leave_no_cycles(store)
    finally:
        await store.close()


async def _requests_leave_no_cycles(store: CassandraStore) -> None:
    shard = 1_000_000 + uuid.uuid4().int % 1_000_000  # no such checkpoint: the condition fails, nothing is written
    await store.execute("SELECT release_version FROM system.local")
    requests = 100
    gc.collect()
    gc.disable()
    try:
        for _ in range(requests // 2):
            await store.execute("SELECT release_version FROM system.local")
            await store.applied(NO_SUCH_CHECKPOINT, ["t", shard])
        left = gc.collect()
    finally:
        gc.enable()
    assert left < requests  # 33 a request before (3,300 here)


@pytest.mark.parametrize("driver_io", ["libev", "loop"])
async def test_every_connection_sends_its_requests_without_nagle(settings: Settings, driver_io: str) -> None:
    # With Nagle's algorithm on (the driver's default) a request written behind an unacknowledged one waited for the
    # node's delayed ACK (40 ms): one API process made ~400 creates/s with its CPU idle.
    store = await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io=driver_io))
    try:
        await asyncio.gather(*(store.execute(NO_SUCH_ROW, [n]) for n in range(20)))
        connections = [store._cluster.control_connection._connection]
        for pool in store._session.get_pools():
            connections.extend(pool.get_connections())
        assert len(connections) >= 2
        for connection in connections:
            sock = connection._socket
            transport = getattr(connection, "_transport", None)
            if transport is not None:  # served by the loop: the transport owns the socket now
                sock = transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0, connection
    finally:
        await store.close()
