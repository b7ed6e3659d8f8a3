"""Per-tenant quotas kept in Redis: the API request rate (a one-second window) and the number of jobs.

The job count is a Redis counter seeded from Cassandra the first time it is needed; it may drift by the odd
crashed request, which a quota tolerates (the count is re-seeded when the key is lost).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tickwheel.errors import InvalidInput, QuotaExceeded, Unauthorized, Unavailable
from tickwheel.flow.redis import REDIS_DOWN
from tickwheel.store.tenants import Tenant

from .context import Api

T = TypeVar("T")


class JobQuotaExceeded(InvalidInput):
    title = "Job quota exceeded"


async def redis_call(call: Callable[[], Awaitable[T]]) -> T:
    """Await a Redis call; Redis down is 503 (retriable)."""
    try:
        return await call()
    except REDIS_DOWN as exc:
        raise Unavailable(f"Redis is unavailable: {exc}") from exc


async def check_rate(
    api: Api,
    tenant: Tenant,
    *,
    units: int = 1,
    revoked_mark: str | None = None,
    on_revoked: Callable[[], None] | None = None,
) -> None:
    """429 with Retry-After when the tenant spent more than its requests per second in this second; a request
    costs `units` (an expensive read is charged as several requests). With `revoked_mark`, the same round trip
    asks whether the caller's key was revoked (401, `on_revoked` first)."""
    limit = tenant.requests_per_s or api.settings.api.requests_per_s
    now = api.clock()
    key = api.redis.key("rate", tenant.tenant_id, str(int(now.timestamp())))

    async def count() -> Any:
        async with api.redis.pipeline() as pipe:
            pipe.incrby(key, units)
            pipe.expire(key, 2)
            if revoked_mark is not None:
                pipe.exists(revoked_mark)
            return await pipe.execute()

    answers = await redis_call(count)
    if revoked_mark is not None and answers[2]:
        if on_revoked is not None:
            on_revoked()
        raise Unauthorized("the API key is unknown or revoked")
    used = int(answers[0])
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


MAX_PREVIEW = 100
# 100 fires cost 2-7 ms of search (benchmarks/preview_bench.py): at 2 fires per request unit, the default 200
# requests/s let one tenant take at most 4 full previews a second (~25 ms of event loop), not 200.
PREVIEW_FIRES_PER_UNIT = 2


async def charge_preview(api: Api, tenant: Tenant, count: int) -> None:
    """Charge a preview of `count` fires against the tenant's rate (429 when it does not fit this second)."""
    await check_rate(api, tenant, units=math.ceil(count / PREVIEW_FIRES_PER_UNIT))


async def take_job_slot(api: Api, tenant: Tenant) -> None:
    """Count one more job for the tenant, or 422 when it already has its maximum."""
    limit = tenant.max_jobs or api.settings.api.max_jobs_per_tenant
    key = api.redis.key("jobs", tenant.tenant_id)
    used = int(await redis_call(lambda: api.redis.run_script(TAKE_JOB_SLOT, [key], [limit])))
    if used == -1:
        seed = await api.store.count_jobs(tenant.tenant_id)
        await redis_call(lambda: api.redis.set_if_absent(key, seed))
        used = int(await redis_call(lambda: api.redis.run_script(TAKE_JOB_SLOT, [key], [limit])))
    if used == -2:
        raise JobQuotaExceeded(f"the tenant already has its maximum of {limit} jobs; delete some first")


async def give_back_job_slot(api: Api, tenant: Tenant) -> None:
    key = api.redis.key("jobs", tenant.tenant_id)
    await redis_call(lambda: api.redis.decrement(key))


def min_interval_s(api: Api, tenant: Tenant) -> int:
    return tenant.min_interval_s or api.settings.api.min_interval_s
