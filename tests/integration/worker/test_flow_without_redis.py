"""Flow limits protect targets; they must not stop the execution path: while Redis does not answer (a proxy this
test owns is cut between the limits and the shared Redis), a call is let through unlimited and its release is
left to expire, and after one failure Redis is not asked again for a second."""

from __future__ import annotations

import dataclasses
import uuid
from urllib.parse import urlsplit

from prometheus_client import REGISTRY

from tests.integration.api.proxies import TcpProxy
from tickwheel.flow.limits import Caps, FlowLimits, Permit
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings

CAPS = Caps(tenant_concurrency=1, target_concurrency=1, target_rate_per_s=1.0, hold_s=5.0)


def fail_open(step: str) -> float:
    return REGISTRY.get_sample_value("tickwheel_redis_fail_open_total", {"check": f"flow_{step}"}) or 0.0


async def test_calls_go_ahead_unlimited_while_redis_does_not_answer(settings: Settings) -> None:
    upstream = urlsplit(settings.redis.url)
    proxy = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 6379).start()
    redis_settings = dataclasses.replace(settings.redis, url=f"redis://127.0.0.1:{proxy.port}{upstream.path}")
    redis = RedisClient(redis_settings, prefix=f"twflow{uuid.uuid4().hex[:8]}:")
    limits = FlowLimits(settings.worker, redis)
    try:
        held = await limits.acquire("t", "example.com", CAPS, now_ms=1_000)
        assert isinstance(held, Permit)
        assert not isinstance(await limits.acquire("t", "example.com", CAPS, now_ms=1_001), Permit)  # the cap
        proxy.cut()
        acquired_before = fail_open("acquire")
        permits = [await limits.acquire("t", "example.com", CAPS, now_ms=1_002 + i) for i in range(5)]
        assert all(isinstance(p, Permit) for p in permits)  # past the tenant cap of 1: unlimited
        assert fail_open("acquire") == acquired_before + 5
        assert await limits.release(held, failed=False, now_ms=1_010) == "unknown"
        proxy.restore()
    finally:
        await redis.close()
        proxy.close()
