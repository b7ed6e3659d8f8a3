"""The store's contract fixture: every test of this directory runs on the in-memory twin and on Cassandra, the
latter with the driver's connections on its libev thread and on the event loop (`cassandra.driver_io`)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.memory_api import MemoryApiStore
from tickwheel.store.tables import CassandraTables


@pytest.fixture
async def loop_store(settings: Settings) -> AsyncIterator[CassandraStore]:
    """The real store with its connections served by the test's event loop (store.loop_io)."""
    opened = await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io="loop"))
    yield opened
    await opened.close()


@pytest.fixture(params=["memory", "cassandra", "cassandra-loop"])
def ports(request: pytest.FixtureRequest) -> MemoryApiStore | CassandraTables:
    """The twin (every port, the API's too), or the real store on this run's keyspace (the `store` fixture: a
    failure in CI without a server), on the driver's I/O thread or on the event loop."""
    if request.param == "memory":
        return MemoryApiStore()
    store: CassandraStore = request.getfixturevalue("store" if request.param == "cassandra" else "loop_store")
    return CassandraTables(store)
