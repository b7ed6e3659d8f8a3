"""The job quota without Redis (or with a Redis that lost its counters): the tenant's listing is counted once for
all the creates that ask at the same moment, and the quota still holds across them (run 12 of the soak)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from api.local_limits import LocalLimits
from api.quotas import take_job_slots
from tickwheel.settings import Settings

CREATES = 50


class CountingStore:
    """`count_jobs` that answers only when released, counting how often it was asked."""

    def __init__(self, jobs: int) -> None:
        self.jobs, self.reads, self.release = jobs, 0, asyncio.Event()

    async def count_jobs(self, tenant_id: str) -> int:
        self.reads += 1
        await self.release.wait()
        return self.jobs


class AwayRedis:
    """A Redis that does not answer."""

    def key(self, *parts: str) -> str:
        return ":".join(parts)

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> int:
        raise ConnectionRefusedError("Error 111 connecting")


class EmptyRedis(AwayRedis):
    """A Redis just restarted: the counter's key is gone until someone seeds it, then the script counts on it."""

    def __init__(self) -> None:
        self.counter: int | None = None

    async def set_if_absent(self, key: str, value: int) -> bool:
        if self.counter is None:
            self.counter = value
            return True
        return False

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> int:
        limit, wanted = int(args[0]), int(args[1])
        if self.counter is None:
            return -1
        taken = max(0, min(wanted, limit - self.counter))
        self.counter += taken
        return taken


async def creates_at_once(redis: AwayRedis, store: CountingStore, max_jobs: int) -> int:
    """CREATES creates of one tenant asking for a slot together: how many got one."""
    api = SimpleNamespace(settings=Settings(), redis=redis, store=store, local=LocalLimits())
    tenant = SimpleNamespace(tenant_id="acme", max_jobs=max_jobs)
    asking = [asyncio.ensure_future(take_job_slots(api, tenant, 1)) for _ in range(CREATES)]  # type: ignore[arg-type]
    await asyncio.sleep(0)
    store.release.set()
    return sum(await asyncio.gather(*asking))


async def test_without_redis_the_creates_of_a_moment_count_the_listing_once_and_keep_the_quota() -> None:
    store = CountingStore(jobs=90)
    taken = await creates_at_once(AwayRedis(), store, max_jobs=100)
    assert store.reads == 1
    assert taken == 10  # 90 jobs + 10 under the maximum of 100, not 50 over it


async def test_a_redis_without_its_counters_is_seeded_by_one_count() -> None:
    store, redis = CountingStore(jobs=90), EmptyRedis()
    taken = await creates_at_once(redis, store, max_jobs=100)
    assert store.reads == 1
    assert (taken, redis.counter) == (10, 100)
