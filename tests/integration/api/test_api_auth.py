"""Hostile callers of the API: wrong keys are throttled and cached, revocations hold at once on every process."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Handler

from api.auth import key_id_of, revoke_everywhere
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store import tenants
from tickwheel.store.cassandra import CassandraStore


@pytest.fixture
def key_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every key the API looked up in Cassandra."""
    reads: list[str] = []
    original = tenants.authenticate

    async def counting(store: CassandraStore, key: str) -> str | None:
        reads.append(key)
        return await original(store, key)

    monkeypatch.setattr(tenants, "authenticate", counting)  # the module api.auth reads it from
    return reads


@pytest.fixture
async def make_api(settings: Settings, make_client: Callable[..., Awaitable[TestClient]]) -> Any:
    """make_api(**api_settings) -> a client whose caller address is the X-Test-Client header (a fresh Redis
    namespace per test, so failure counts start at zero)."""
    redis = RedisClient(settings.redis, prefix=f"twauth{secrets.token_hex(4)}:")

    @web.middleware
    async def client_address(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await handler(request.clone(remote=request.headers.get("X-Test-Client", "127.0.0.1")))

    async def make(**overrides: Any) -> TestClient:
        return await make_client(redis_=redis, middleware=client_address, **overrides)

    yield make
    await redis.close()


def bearer(key: str, client: str = "203.0.113.7") -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "X-Test-Client": client}


async def test_a_flood_of_wrong_keys_is_throttled_with_429_and_retry_after(
    make_api: Callable[..., Awaitable[TestClient]], key_reads: list[str]
) -> None:
    client = await make_api(auth_failures_per_min=20)
    statuses = []
    for _ in range(200):
        response = await client.get("/v1/jobs", headers=bearer(f"tw_{secrets.token_urlsafe(32)}"))
        statuses.append(response.status)
        if response.status == 429:
            assert int(response.headers["Retry-After"]) >= 1
            assert response.content_type == "application/problem+json"
    assert statuses[:20] == [401] * 20 and set(statuses[20:]) == {429}
    assert len(key_reads) == 20  # the rest cost no database read


async def test_a_wrong_key_sent_again_costs_no_database_read(
    make_api: Callable[..., Awaitable[TestClient]], key_reads: list[str]
) -> None:
    client = await make_api(auth_negative_cache_s=30.0)
    wrong = f"tw_{secrets.token_urlsafe(32)}"
    assert [(await client.get("/v1/jobs", headers=bearer(wrong))).status for _ in range(10)] == [401] * 10
    assert key_reads == [wrong]


async def test_failures_are_also_counted_per_key_prefix_across_client_addresses(
    make_api: Callable[..., Awaitable[TestClient]],
) -> None:
    client = await make_api(auth_failures_per_min=5)
    prefix = "tw_" + secrets.token_urlsafe(8)[:7]
    statuses = [
        (await client.get("/v1/jobs", headers=bearer(prefix + secrets.token_urlsafe(30), f"198.51.100.{n}"))).status
        for n in range(8)
    ]
    assert statuses == [401] * 5 + [429] * 3
    other = await client.get("/v1/jobs", headers=bearer(f"tw_{secrets.token_urlsafe(32)}", "198.51.100.99"))
    assert other.status == 401  # another prefix from another address is not throttled


async def test_a_throttled_address_keeps_working_for_a_key_it_already_proved(
    make_api: Callable[..., Awaitable[TestClient]], store: CassandraStore
) -> None:
    client = await make_api(auth_failures_per_min=3, auth_cache_s=30.0)
    _, key = await tenants.create_tenant(store, f"t{secrets.token_hex(6)}", datetime.now(UTC))
    assert (await client.get("/v1/jobs", headers=bearer(key))).status == 200
    for _ in range(4):
        await client.get("/v1/jobs", headers=bearer(f"tw_{secrets.token_urlsafe(32)}"))
    assert (await client.get("/v1/jobs", headers=bearer(key))).status == 200


async def test_a_revoked_key_stops_working_at_once_on_every_api_process(
    make_api: Callable[..., Awaitable[TestClient]], store: CassandraStore
) -> None:
    first, second = await make_api(auth_cache_s=300.0), await make_api(auth_cache_s=300.0)
    tenant, key = await tenants.create_tenant(store, f"t{secrets.token_hex(6)}", datetime.now(UTC))
    for process in (first, second):
        assert (await process.get("/v1/jobs", headers=bearer(key))).status == 200  # now cached for 300 s
    await tenants.revoke_key(store, tenant.tenant_id, key_id_of(key), datetime.now(UTC))
    await revoke_everywhere(_redis_of(first), [key_id_of(key)])
    for process in (first, second):
        assert (await process.get("/v1/jobs", headers=bearer(key))).status == 401


def _redis_of(client: TestClient) -> RedisClient:
    from api.context import API

    assert isinstance(client.server, TestServer) and client.server.app is not None
    return client.server.app[API].redis
