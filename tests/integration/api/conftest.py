"""Fixtures for the API on the real servers: the app in a TestServer, and tenants with their keys.

Every response a test receives is checked against schemas/openapi.yaml when the test ends: a route, method
or status code the document does not list fails the test that produced it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Middleware

from api import console
from api.app import make_app
from api.context import utc_now
from api.meta import openapi_document
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import NewRun
from tickwheel.store.tables import CassandraTables
from tickwheel.store.tenants import create_tenant

STACK_DIR = Path(__file__).resolve().parents[3] / ".stack"


@dataclasses.dataclass
class Caller:
    """A tenant and a client that sends its key."""

    tenant_id: str
    key: str
    client: TestClient

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **(extra or {})}

    async def call(self, method: str, path: str, *, json: Any = None, data: Any = None, headers: Any = None) -> Any:
        return await self.client.request(method, path, json=json, data=data, headers=self.headers(headers))


async def problem_of(response: Any, status: int) -> dict[str, Any]:
    """The problem+json body of `response`, asserting its status and media type first."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/problem+json"
    document: dict[str, Any] = await response.json()
    assert document["status"] == status and document["detail"]
    return document


def api_settings(settings: Settings, **api: Any) -> Settings:
    # No shedding for loop lag: the app shares the test's loop, which a loaded CI box lags (tests/unit/api covers it).
    defaults = {"auth_cache_s": 0.0, "lag_target_s": 0.0}
    return dataclasses.replace(settings, api=dataclasses.replace(settings.api, **{**defaults, **api}))


@pytest.fixture(scope="session")
async def producer(settings: Settings) -> AsyncIterator[KafkaProducer]:
    made = KafkaProducer(settings.kafka)
    yield made
    await made.close()


@pytest.fixture(scope="session")
async def redis(settings: Settings) -> AsyncIterator[RedisClient]:
    client = RedisClient(settings.redis, prefix=f"twapi{uuid.uuid4().hex[:8]}:")
    yield client
    await client.close()


def _documented(path: str, method: str, status: int) -> bool:
    operation = openapi_document()["paths"].get(path, {}).get(method.lower())
    return operation is not None and str(status) in operation.get("responses", {})


@pytest.fixture
async def make_client(
    settings: Settings, store: CassandraStore, producer: KafkaProducer, redis: RedisClient
) -> AsyncIterator[Callable[..., Awaitable[TestClient]]]:
    """make_client(clock=, store_=, redis_=, settings_=, middleware=, **api_settings) -> a TestClient on a fresh app
    (settings_ replaces the run's settings, middleware runs after the error middleware); responses are recorded."""
    seen: list[tuple[str, str, int]] = []
    clients: list[TestClient] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        resource = request.match_info.route.resource
        # Unmatched paths are aiohttp's 404, not a documented route; the console's files are not part of the API.
        if resource is not None and not resource.canonical.startswith(console.PREFIX):
            seen.append((resource.canonical, request.method, response.status))
        return response

    async def make(
        clock: Callable[[], datetime] | None = None,
        store_: Any = None,
        redis_: RedisClient | None = None,
        settings_: Settings | None = None,
        middleware: Middleware | None = None,
        **api: Any,
    ) -> TestClient:
        tables = CassandraTables(store_ or store)  # `store_`: a CassandraStore with injected faults
        made_settings = api_settings(settings_ or settings, **api)
        app = make_app(made_settings, tables, producer, redis_ or redis, clock=clock or utc_now)
        if middleware is not None:
            app.middlewares.insert(1, middleware)  # after the error middleware, before authentication
        app.middlewares.insert(0, record)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
    undocumented = [s for s in seen if s[1] != "HEAD" and not _documented(*s)]
    assert not undocumented, f"responses missing from schemas/openapi.yaml: {undocumented}"


@pytest.fixture
async def client(make_client: Callable[..., Awaitable[TestClient]]) -> TestClient:
    return await make_client()


@pytest.fixture
def make_tenant(store: CassandraStore, client: TestClient) -> Callable[[], Awaitable[Caller]]:
    async def make(on: TestClient | None = None) -> Caller:
        tenant_id = f"t{uuid.uuid4().hex[:12]}"
        _, key = await create_tenant(store, tenant_id, datetime.now(UTC), tenant_id=tenant_id)
        return Caller(tenant_id, key, on or client)

    return make


@pytest.fixture
async def alice(make_tenant: Callable[[], Awaitable[Caller]]) -> Caller:
    return await make_tenant()


@pytest.fixture
async def bob(make_tenant: Callable[[], Awaitable[Caller]]) -> Caller:
    return await make_tenant()


async def existing_run(store: CassandraStore, run_id: uuid.UUID | None) -> NewRun:
    """The identity of a run the test knows exists (it fails the test when the run has no row)."""
    assert run_id is not None
    found = await runs.get_run(store, run_id)
    assert found is not None, f"run {run_id} has no row"
    return found.identity()
