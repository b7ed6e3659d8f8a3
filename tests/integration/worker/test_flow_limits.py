"""The Redis flow limits on the real server: bucket, caps, slot expiry and the breaker's states."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from tickwheel.flow.limits import Caps, Denied, FlowLimits, Permit
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings

CAPS = Caps(tenant_concurrency=2, target_concurrency=10, target_rate_per_s=1000.0, hold_s=5.0)


@pytest.fixture
async def limits(settings: Settings, namespace: str) -> AsyncIterator[FlowLimits]:
    worker = dataclasses.replace(settings.worker, breaker_min_calls=4, breaker_window_s=10.0, breaker_open_s=1.0)
    redis = RedisClient(settings.redis, prefix=f"{namespace}:")
    yield FlowLimits(worker, redis)
    await redis.close()


async def test_the_tenant_cap_refuses_a_third_slot_until_one_is_released_or_expires(limits: FlowLimits) -> None:
    a = await limits.acquire("t", "h", CAPS, now_ms=1_000)
    b = await limits.acquire("t", "h", CAPS, now_ms=1_000)
    assert isinstance(a, Permit) and isinstance(b, Permit)
    assert await limits.acquire("t", "h", CAPS, now_ms=1_001) == Denied("tenant_concurrency", 0.0)
    assert isinstance(await limits.acquire("other", "h", CAPS, now_ms=1_001), Permit)
    await limits.release(a, failed=False, now_ms=1_002)
    assert isinstance(await limits.acquire("t", "h", CAPS, now_ms=1_003), Permit)
    # b and the new slot were never released: they expire with their hold (5 s)
    assert isinstance(await limits.acquire("t", "h", CAPS, now_ms=7_000), Permit)


async def test_the_token_bucket_refuses_when_empty_and_says_how_long_to_wait(limits: FlowLimits) -> None:
    caps = dataclasses.replace(CAPS, tenant_concurrency=100, target_rate_per_s=2.0)
    granted = [await limits.acquire("t", "slow.example", caps, now_ms=10_000) for _ in range(3)]
    assert [isinstance(g, Permit) for g in granted] == [True, True, False]
    assert granted[2] == Denied("target_rate", 0.5)
    assert isinstance(await limits.acquire("t", "slow.example", caps, now_ms=10_500), Permit)


async def test_the_breaker_needs_enough_calls_opens_on_a_failing_majority_and_one_probe_decides(
    limits: FlowLimits,
) -> None:
    caps = dataclasses.replace(CAPS, tenant_concurrency=100)
    for failed in (True, True, True):
        permit = await limits.acquire("t", "down", caps, now_ms=20_000)
        assert isinstance(permit, Permit)
        assert await limits.release(permit, failed=failed, now_ms=20_000) == "closed"  # 3 calls: too few to judge
    permit = await limits.acquire("t", "down", caps, now_ms=20_000)
    assert isinstance(permit, Permit)
    assert await limits.release(permit, failed=False, now_ms=20_000) == "opened"  # 3 of 4 failed
    assert await limits.acquire("t", "down", caps, now_ms=20_500) == Denied("breaker_open", 0.5)
    probe = await limits.acquire("t", "down", caps, now_ms=21_000)
    assert isinstance(probe, Permit) and probe.probe
    assert await limits.acquire("t", "down", caps, now_ms=21_001) == Denied("breaker_half_open", 1.0)
    assert await limits.release(probe, failed=True, now_ms=21_100) == "opened"
    probe = await limits.acquire("t", "down", caps, now_ms=22_200)
    assert isinstance(probe, Permit) and probe.probe
    assert await limits.release(probe, failed=False, now_ms=22_300) == "closed"
    assert await limits.breaker_open_until_ms("down") is None
    after = await limits.acquire("t", "down", caps, now_ms=22_400)
    assert isinstance(after, Permit) and not after.probe
