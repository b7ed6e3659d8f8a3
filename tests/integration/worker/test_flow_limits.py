"""The Redis flow limits on the real server: bucket, caps, slot expiry and the breaker's states."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

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
    assert await limits.breaker_open_until_ms("t", "down") is None
    after = await limits.acquire("t", "down", caps, now_ms=22_400)
    assert isinstance(after, Permit) and not after.probe


async def open_breaker(limits: FlowLimits, tenant: str, host: str, now_ms: int) -> None:
    """Four failed calls of `tenant` to `host`: its own breaker opens (breaker_min_calls = 4)."""
    caps = dataclasses.replace(CAPS, tenant_concurrency=100)
    states = []
    for _ in range(4):
        permit = await limits.acquire(tenant, host, caps, now_ms=now_ms)
        assert isinstance(permit, Permit), permit
        states.append(await limits.release(permit, failed=True, now_ms=now_ms))
    assert states[-1] == "opened"


async def test_one_tenants_failures_open_only_its_own_breaker_on_a_shared_host(limits: FlowLimits) -> None:
    await open_breaker(limits, "mallory", "shared.example", now_ms=30_000)
    assert await limits.acquire("mallory", "shared.example", CAPS, now_ms=30_100) == Denied("breaker_open", 0.9)
    victim = await limits.acquire("alice", "shared.example", CAPS, now_ms=30_100)
    assert isinstance(victim, Permit) and not victim.probe
    assert await limits.breaker_open_until_ms("alice", "shared.example") is None


async def test_a_tenant_cannot_hold_another_tenants_half_open_probe(limits: FlowLimits) -> None:
    await open_breaker(limits, "mallory", "probe.example", now_ms=40_000)
    await open_breaker(limits, "alice", "probe.example", now_ms=40_000)
    mallory_probe = await limits.acquire("mallory", "probe.example", CAPS, now_ms=41_000)
    assert isinstance(mallory_probe, Permit) and mallory_probe.probe
    alice_probe = await limits.acquire("alice", "probe.example", CAPS, now_ms=41_000)
    assert isinstance(alice_probe, Permit) and alice_probe.probe  # her own probe, not blocked by mallory's
    assert await limits.release(mallory_probe, failed=True, now_ms=41_100) == "opened"
    assert await limits.release(alice_probe, failed=False, now_ms=41_100) == "closed"
    assert isinstance(await limits.acquire("alice", "probe.example", CAPS, now_ms=41_200), Permit)


async def test_the_host_closes_to_every_tenant_once_two_tenants_breakers_are_open(limits: FlowLimits) -> None:
    await open_breaker(limits, "a", "down.example", now_ms=50_000)
    assert isinstance(await limits.acquire("c", "down.example", CAPS, now_ms=50_100), Permit)  # one tenant: no
    await open_breaker(limits, "b", "down.example", now_ms=50_200)
    assert await limits.acquire("c", "down.example", CAPS, now_ms=50_300) == Denied("host_breaker_open", 0.7)
    probe = await limits.acquire("a", "down.example", CAPS, now_ms=51_000)  # a's breaker is half-open
    assert isinstance(probe, Permit) and probe.probe
    assert await limits.release(probe, failed=False, now_ms=51_050) == "closed"
    assert isinstance(await limits.acquire("c", "down.example", CAPS, now_ms=51_100), Permit)


@pytest.mark.parametrize("spelling", ["EXAMPLE.com", "example.com.", "Example.COM."])
async def test_every_spelling_of_a_host_shares_its_limits(limits: FlowLimits, spelling: str) -> None:
    caps = dataclasses.replace(CAPS, tenant_concurrency=100, target_concurrency=1)
    held = await limits.acquire("t", "example.com", caps, now_ms=60_000)
    assert isinstance(held, Permit)
    assert await limits.acquire("u", spelling, caps, now_ms=60_001) == Denied("target_concurrency", 0.0)


async def test_calls_made_together_share_one_pipeline_and_each_gets_its_own_answer(limits: FlowLimits) -> None:
    caps = dataclasses.replace(CAPS, tenant_concurrency=3)
    sent: list[int] = []
    pipeline = limits.redis._batcher._pipeline

    async def counted(queued: list[Any]) -> list[Any]:
        sent.append(len(queued))
        return await pipeline(queued)

    limits.redis._batcher._pipeline = counted  # type: ignore[method-assign]
    granted = await asyncio.gather(*(limits.acquire("t", "h", caps, now_ms=1_000) for _ in range(5)))
    assert [isinstance(g, Permit) for g in granted] == [True, True, True, False, False]
    assert granted[3] == Denied("tenant_concurrency", 0.0)
    permits = [g for g in granted if isinstance(g, Permit)]
    states = await asyncio.gather(*(limits.release(p, failed=False, now_ms=1_001) for p in permits))
    assert states == ["closed"] * 3
    assert sent == [5, 3]  # two round trips for eight script calls


async def test_scripts_flushed_from_redis_are_loaded_again(limits: FlowLimits) -> None:
    await limits.redis.redis.script_flush()
    assert isinstance(await limits.acquire("t", "h", CAPS, now_ms=1_000), Permit)
