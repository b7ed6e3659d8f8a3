"""Anonymous callers learn which dependency is down, never where it runs."""

from __future__ import annotations

import dataclasses
import socket

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from api.app import make_app
from api.problems import problems
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.errors import Unavailable
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tables import CassandraTables


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_readyz_names_the_dependency_that_is_down_but_not_its_address(
    settings: Settings, store: CassandraStore, producer: KafkaProducer, redis: RedisClient
) -> None:
    port = closed_port()
    broken = dataclasses.replace(settings, kafka=dataclasses.replace(settings.kafka, bootstrap=f"127.0.0.1:{port}"))
    client = TestClient(TestServer(make_app(broken, CassandraTables(store), producer, redis)))
    await client.start_server()
    try:
        response = await client.get("/readyz")
        body = await response.text()
    finally:
        await client.close()
    assert response.status == 503 and response.headers["Retry-After"]
    assert "Kafka" in body and str(port) not in body and "127.0.0.1" not in body


async def test_a_503_body_never_carries_the_adapters_host_and_port() -> None:
    async def failing(request: web.Request) -> web.Response:
        raise Unavailable("Cassandra at 10.1.2.3:9042,10.1.2.4:9042 did not answer: OperationTimedOut(...)")

    app = web.Application(middlewares=[problems])
    app.router.add_get("/x", failing)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        response = await client.get("/x")
        body = await response.json()
    finally:
        await client.close()
    assert response.status == 503
    assert body["detail"] == "Cassandra is unavailable; try again later"
