"""The store's contract fixture: every test of this directory runs on the in-memory twin and on Cassandra."""

from __future__ import annotations

import pytest

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.memory_api import MemoryApiStore
from tickwheel.store.tables import CassandraTables


@pytest.fixture(params=["memory", "cassandra"])
def ports(request: pytest.FixtureRequest) -> MemoryApiStore | CassandraTables:
    """The twin (every port, the API's too), or the real store on this run's keyspace (the `store` fixture: a
    failure in CI without a server)."""
    if request.param == "memory":
        return MemoryApiStore()
    store: CassandraStore = request.getfixturevalue("store")
    return CassandraTables(store)
