"""Per-tenant quotas kept in Redis: the API request rate (a one-second window) and the number of jobs.

The job count is a Redis counter seeded from Cassandra the first time it is needed; it may drift by the odd
crashed request, which a quota tolerates (the count is re-seeded when the key is lost).

Redis holds limits, not truth, so a Redis that does not answer must not fail tenants' requests: every check here
fails open, bounded by a per-process stand-in (`LocalLimits`): the request rate is counted in the same one-second
windows in process (each API process then allows the tenant's rate, so N processes allow N times it), and the job
count is taken from Cassandra (cached a few seconds, counted on in process). Each such check is counted in
`tickwheel_redis_fail_open_total{check}` and logged as a WARNING (at most every few seconds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from tickwheel.errors import InvalidInput, QuotaExceeded, Unauthorized
from tickwheel.flow.redis import REDIS_DOWN
from tickwheel.store.tenants import Tenant

from .context import Api

JOB_COUNT_FRESH_S = 5.0  # how long a Cassandra job count stands in for the Redis counter before it is read again


class JobQuotaExceeded(InvalidInput):
    title = "Job quota exceeded"


async def check_rate(
    api: Api,
    tenant: Tenant,
    *,
    units: int = 1,
    revoked_mark: str | None = None,
    on_revoked: Callable[[], None] | None = None,
) -> bool:
    """429 with Retry-After when the tenant spent more than its requests per second in this second; a request
    costs `units` (an expensive read is charged as several requests). With `revoked_mark`, the same round trip
    asks whether the caller's key was revoked (401, `on_revoked` first). False when Redis did not answer: the rate
    was counted in this process only and the revocation mark was not read."""
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

    try:
        api.local.ask_redis()
        answers = await count()
    except REDIS_DOWN as exc:
        api.local.without_redis("rate", exc)
        used = api.local.count(("rate", tenant.tenant_id), int(now.timestamp()), units)
        _refuse_above(used, limit, now.microsecond)
        return False
    if revoked_mark is not None and answers[2]:
        if on_revoked is not None:
            on_revoked()
        raise Unauthorized("the API key is unknown or revoked")
    _refuse_above(int(answers[0]), limit, now.microsecond)
    return True


def _refuse_above(used: int, limit: int, microsecond: int) -> None:
    if used > limit:
        raise QuotaExceeded(f"more than {limit} requests per second; slow down", retry_after_s=1.0 - microsecond / 1e6)


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
    try:
        api.local.ask_redis()
        used = int(await api.redis.run_script(TAKE_JOB_SLOT, [key], [limit]))
        if used == -1:
            seed = await api.store.count_jobs(tenant.tenant_id)
            await api.redis.set_if_absent(key, seed)
            used = int(await api.redis.run_script(TAKE_JOB_SLOT, [key], [limit]))
    except REDIS_DOWN as exc:
        api.local.without_redis("job_slots", exc)
        used = await _take_local_job_slot(api, tenant.tenant_id, limit)
    if used == -2:
        raise JobQuotaExceeded(f"the tenant already has its maximum of {limit} jobs; delete some first")


async def _take_local_job_slot(api: Api, tenant_id: str, limit: int) -> int:
    """The job count without Redis: Cassandra's (the truth), read again after JOB_COUNT_FRESH_S, plus the jobs this
    process created since; -2 at the limit, as the Redis script answers."""
    counted = api.local.job_counts.get(tenant_id)
    if counted is None or time.monotonic() - counted[1] > JOB_COUNT_FRESH_S:
        counted = (await api.store.count_jobs(tenant_id), time.monotonic())
    if counted[0] >= limit:
        api.local.job_counts[tenant_id] = counted
        return -2
    api.local.job_counts[tenant_id] = (counted[0] + 1, counted[1])
    return counted[0] + 1


async def give_back_job_slot(api: Api, tenant: Tenant) -> None:
    """One job less for the tenant (a create that did not happen, a delete). Without Redis the counter keeps the
    job (it over-counts by one until its key is lost and re-seeded): refusing the request for it would be worse."""
    key = api.redis.key("jobs", tenant.tenant_id)
    try:
        api.local.ask_redis()
        await api.redis.decrement(key)
    except REDIS_DOWN as exc:
        api.local.without_redis("job_slots", exc)
        counted = api.local.job_counts.get(tenant.tenant_id)
        if counted is not None:
            api.local.job_counts[tenant.tenant_id] = (max(0, counted[0] - 1), counted[1])


def min_interval_s(api: Api, tenant: Tenant) -> int:
    return tenant.min_interval_s or api.settings.api.min_interval_s
