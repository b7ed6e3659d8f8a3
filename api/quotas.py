"""Per-tenant quotas kept in Redis: the API request rate (a one-second window) and the number of jobs.

The job count is a Redis counter seeded from Cassandra the first time it is needed; it may drift by the odd
crashed request, which a quota tolerates (the count is re-seeded when the key is lost).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tickwheel.errors import InvalidInput, QuotaExceeded, Unavailable
from tickwheel.flow.redis import REDIS_DOWN
from tickwheel.store.jobs import count_jobs
from tickwheel.store.tenants import Tenant

from .context import Api

T = TypeVar("T")


class JobQuotaExceeded(InvalidInput):
    title = "Job quota exceeded"


async def _redis(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except REDIS_DOWN as exc:
        raise Unavailable(f"Redis is unavailable: {exc}") from exc


async def check_rate(api: Api, tenant: Tenant) -> None:
    """429 with Retry-After when the tenant sent more than its requests per second in this second."""
    limit = tenant.requests_per_s or api.settings.api.requests_per_s
    now = api.clock()
    key = api.redis.key("rate", tenant.tenant_id, str(int(now.timestamp())))

    async def count() -> Any:
        async with api.redis.redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, 2)
            return await pipe.execute()

    used = int((await _redis(count))[0])
    if used > limit:
        raise QuotaExceeded(
            f"more than {limit} requests per second; slow down", retry_after_s=1.0 - now.microsecond / 1e6
        )


# One round trip per create: count the job if the counter exists (-1: not seeded yet), refuse above the limit.
TAKE_JOB_SLOT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local used = redis.call('INCR', KEYS[1])
if used > tonumber(ARGV[1]) then redis.call('DECR', KEYS[1]); return -2 end
return used
"""


async def take_job_slot(api: Api, tenant: Tenant) -> None:
    """Count one more job for the tenant, or 422 when it already has its maximum."""
    limit = tenant.max_jobs or api.settings.api.max_jobs_per_tenant
    key = api.redis.key("jobs", tenant.tenant_id)
    script = await api.redis.script(TAKE_JOB_SLOT)
    used = int(await _redis(lambda: script(keys=[key], args=[limit])))
    if used == -1:
        seed = await count_jobs(api.store, tenant.tenant_id)
        await _redis(lambda: api.redis.redis.set(key, seed, nx=True))
        used = int(await _redis(lambda: script(keys=[key], args=[limit])))
    if used == -2:
        raise JobQuotaExceeded(f"the tenant already has its maximum of {limit} jobs; delete some first")


async def give_back_job_slot(api: Api, tenant: Tenant) -> None:
    key = api.redis.key("jobs", tenant.tenant_id)
    await _redis(lambda: api.redis.redis.decr(key))


def min_interval_s(api: Api, tenant: Tenant) -> int:
    return tenant.min_interval_s or api.settings.api.min_interval_s
