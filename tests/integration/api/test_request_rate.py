"""The API's request-rate check (api.quotas.check_rate) on the real Redis: one script call per request, sent in
the process's shared script pipeline, so concurrent requests share a round trip (issue 14, round 3)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from api.local_limits import LocalLimits
from api.quotas import check_rate
from tickwheel.errors import QuotaExceeded, Unauthorized
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.tenants import Tenant


def _api(settings: Settings, redis: RedisClient, limit: int) -> Any:
    api_settings = dataclasses.replace(settings, api=dataclasses.replace(settings.api, requests_per_s=limit))
    fixed = datetime(2026, 12, 1, 3, 0, 0, 500_000, tzinfo=UTC)  # one second's window for every call
    return SimpleNamespace(settings=api_settings, redis=redis, clock=lambda: fixed, local=LocalLimits())


def _tenant(namespace: str) -> Tenant:
    return Tenant(tenant_id=namespace, name=namespace, created_at=None, signing_secrets=())


async def test_concurrent_rate_checks_share_one_round_trip_and_all_count(settings: Settings, namespace: str) -> None:
    redis = RedisClient(settings.redis, prefix=f"{namespace}:")
    api = _api(settings, redis, limit=30)
    await check_rate(api, _tenant(namespace))  # Redis learns the script (a NOSCRIPT answer costs a 2nd pipeline)
    pipelines = 0
    connection = redis._batcher._connection
    assert connection is not None  # the stack's redis:// URL: scripts go through the pipelined connection
    send = connection.execute

    async def counted(commands: list[bytes]) -> list[Any]:
        nonlocal pipelines
        pipelines += 1
        return await send(commands)

    connection.execute = counted  # type: ignore[method-assign]
    try:
        await asyncio.gather(*(check_rate(api, _tenant(namespace)) for _ in range(29)))
        assert pipelines == 1  # one pipeline for the 29 checks made in one loop round (was one each)
        with pytest.raises(QuotaExceeded):
            await check_rate(api, _tenant(namespace))  # the 31st in the same second
    finally:
        await redis.close()


async def test_a_revoked_mark_is_answered_in_the_same_call(settings: Settings, namespace: str) -> None:
    redis = RedisClient(settings.redis, prefix=f"{namespace}:")
    api = _api(settings, redis, limit=100)
    revoked: list[bool] = []
    try:
        mark = redis.key("revoked", "k1")
        await check_rate(api, _tenant(namespace), revoked_mark=mark, on_revoked=lambda: revoked.append(True))
        assert revoked == []
        await redis.redis.set(mark, 1)
        with pytest.raises(Unauthorized):
            await check_rate(api, _tenant(namespace), revoked_mark=mark, on_revoked=lambda: revoked.append(True))
        assert revoked == [True]
    finally:
        await redis.close()


async def test_a_create_routes_rate_check_takes_a_job_slot_only_when_the_request_passes(
    settings: Settings, namespace: str
) -> None:
    redis = RedisClient(settings.redis, prefix=f"{namespace}:")
    api = _api(settings, redis, limit=3)
    api.settings = dataclasses.replace(api.settings, api=dataclasses.replace(api.settings.api, max_jobs_per_tenant=2))
    tenant, mark, jobs = _tenant(namespace), redis.key("revoked", "k1"), redis.key("jobs", namespace)
    try:
        checked = await check_rate(api, tenant, revoked_mark=mark, job_slot=True)
        assert not checked.job_slot and await redis.redis.get(jobs) is None  # not seeded: the create seeds it
        await redis.redis.set(jobs, 1)
        assert (await check_rate(api, tenant, revoked_mark=mark, job_slot=True)).job_slot
        assert not (await check_rate(api, tenant, revoked_mark=mark, job_slot=True)).job_slot  # at the maximum
        assert await redis.redis.get(jobs) == b"2"
        await redis.redis.set(jobs, 0)
        with pytest.raises(QuotaExceeded):  # the 4th request of the second: refused, and takes no slot
            await check_rate(api, tenant, revoked_mark=mark, job_slot=True)
        assert await redis.redis.get(jobs) == b"0"
        await redis.redis.set(mark, 1)
        api.clock = lambda: datetime(2026, 12, 1, 3, 0, 1, tzinfo=UTC)  # the next second: under the rate again
        with pytest.raises(Unauthorized):  # a revoked key takes no slot either
            await check_rate(api, tenant, revoked_mark=mark, job_slot=True)
        assert await redis.redis.get(jobs) == b"0"
    finally:
        await redis.close()
