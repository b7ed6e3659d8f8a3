"""Redis holds limits, not truth: while it does not answer, tenants' requests are served, with the limits kept in
the API process (a rate quota, the job quota from Cassandra, revocation from a short-lived key read). The API
reaches the shared Redis through a TCP proxy this test owns and cuts; no shared server is stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import REGISTRY

from api.auth import REVOKED_WITHOUT_REDIS_S, key_id_of
from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller, problem_of
from tests.integration.api.proxies import TcpProxy
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import revoke_key


@pytest.fixture
async def redis_behind_proxy(settings: Settings) -> AsyncIterator[tuple[RedisClient, TcpProxy]]:
    upstream = urlsplit(settings.redis.url)
    proxy = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 6379).start()
    url = f"redis://127.0.0.1:{proxy.port}{upstream.path}"
    client = RedisClient(dataclasses.replace(settings.redis, url=url), prefix=f"twnoredis{uuid.uuid4().hex[:8]}:")
    yield client, proxy
    await client.close()
    proxy.close()


def fail_open_count(check: str) -> float:
    return REGISTRY.get_sample_value("tickwheel_redis_fail_open_total", {"check": check}) or 0.0


async def test_a_tenant_lists_creates_and_deletes_jobs_while_redis_does_not_answer(
    redis_behind_proxy: tuple[RedisClient, TcpProxy],
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
) -> None:
    redis, proxy = redis_behind_proxy
    client = await make_client(redis_=redis, auth_cache_s=60.0)
    alice = await make_tenant(client)
    assert (await alice.call("POST", "/v1/jobs", json=cron_job())).status == 201  # the job counter is seeded
    rate_before, slots_before = fail_open_count("rate"), fail_open_count("job_slots")
    proxy.cut()
    listed = await alice.call("GET", "/v1/jobs")
    assert listed.status == 200, await listed.text()
    created = await alice.call("POST", "/v1/jobs", json=cron_job(name="while redis is away"))
    assert created.status == 201, await created.text()
    job = await created.json()
    keyed = await alice.call("POST", "/v1/jobs", json=cron_job(), headers={"Idempotency-Key": "k1"})
    assert keyed.status == 201, await keyed.text()
    deleted = await alice.call("DELETE", f"/v1/jobs/{job['id']}", headers={"If-Match": f'"{job["version"]}"'})
    assert deleted.status in (200, 204), await deleted.text()
    assert len((await (await alice.call("GET", "/v1/jobs")).json())["items"]) == 2
    assert fail_open_count("rate") > rate_before and fail_open_count("job_slots") > slots_before
    proxy.restore()
    # Redis is asked again a second after it last failed, however many requests come meanwhile
    back = asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - back < 30:
        counted = fail_open_count("rate")
        assert (await alice.call("GET", "/v1/jobs")).status == 200
        if fail_open_count("rate") == counted:
            break  # this request's rate was counted in Redis
        await asyncio.sleep(0.3)
    else:
        raise AssertionError("Redis was not asked again within 30 s of coming back")


async def test_the_request_rate_is_still_limited_in_process_while_redis_does_not_answer(
    redis_behind_proxy: tuple[RedisClient, TcpProxy],
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
) -> None:
    redis, proxy = redis_behind_proxy
    one_second = datetime(2026, 12, 1, 4, 0, 0, 250_000, tzinfo=UTC)  # every request falls in the same window
    client = await make_client(clock=lambda: one_second, redis_=redis, requests_per_s=3)
    alice = await make_tenant(client)
    proxy.cut()
    statuses = [(await alice.call("GET", "/v1/jobs")).status for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    proxy.restore()


async def test_the_job_quota_holds_from_cassandra_while_redis_does_not_answer(
    redis_behind_proxy: tuple[RedisClient, TcpProxy],
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
) -> None:
    redis, proxy = redis_behind_proxy
    client = await make_client(redis_=redis, max_jobs_per_tenant=2)
    alice = await make_tenant(client)
    proxy.cut()
    first = await alice.call("POST", "/v1/jobs", json=cron_job(name="one"))
    second = await alice.call("POST", "/v1/jobs", json=cron_job(name="two"))
    assert (first.status, second.status) == (201, 201)
    refused = await problem_of(await alice.call("POST", "/v1/jobs", json=cron_job(name="three")), 422)
    assert refused["title"] == "Job quota exceeded"
    proxy.restore()


async def test_a_key_revoked_while_redis_does_not_answer_is_refused_within_seconds(
    redis_behind_proxy: tuple[RedisClient, TcpProxy],
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    """The revocation mark is in Redis; without it a key is trusted only as long as its Cassandra read is fresh,
    though the API process caches keys for five minutes here."""
    redis, proxy = redis_behind_proxy
    client = await make_client(redis_=redis, auth_cache_s=300.0)
    alice = await make_tenant(client)
    assert (await alice.call("GET", "/v1/jobs")).status == 200  # the key is cached
    proxy.cut()
    await revoke_key(store, alice.tenant_id, key_id_of(alice.key), datetime.now(UTC))
    await asyncio.sleep(REVOKED_WITHOUT_REDIS_S + 0.5)
    await problem_of(await alice.call("GET", "/v1/jobs"), 401)
    proxy.restore()
