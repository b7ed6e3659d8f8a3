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
from dataclasses import dataclass

from tickwheel.errors import InvalidInput, QuotaExceeded, Unauthorized
from tickwheel.flow.redis import REDIS_DOWN
from tickwheel.store.tenants import Tenant

from .context import Api

JOB_COUNT_FRESH_S = 5.0  # how long a Cassandra job count stands in for the Redis counter before it is read again


class JobQuotaExceeded(InvalidInput):
    title = "Job quota exceeded"


# Takes up to `wanted` slots of a job counter if it exists (-1: not seeded yet), as many as fit under `limit`: how
# many were taken. Shared by the two scripts below.
_TAKE_SLOTS = """
local function take_slots(key, limit, wanted)
  if redis.call('EXISTS', key) == 0 then return -1 end
  local taken = math.max(0, math.min(wanted, limit - tonumber(redis.call('GET', key))))
  if taken > 0 then redis.call('INCRBY', key, taken) end
  return taken
end
"""

# One script call per request, in the process's shared pipeline (`RedisClient.run_script`): count the request's
# units in this second's window (KEYS[1]) and, with a second key, say whether the caller's key was revoked; with a
# third (a route that creates one job, ONE_JOB_ROUTES), take one of the tenant's job slots in the same round trip,
# unless the request is refused for its rate or its key (ARGV: units, the rate limit, the job limit).
COUNT_REQUEST = (
    _TAKE_SLOTS
    + """
local used = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], 2)
local revoked = 0
if KEYS[2] then revoked = redis.call('EXISTS', KEYS[2]) end
local slot = 0
if KEYS[3] and revoked == 0 and used <= tonumber(ARGV[2]) then slot = take_slots(KEYS[3], tonumber(ARGV[3]), 1) end
return {used, revoked, slot}
"""
)

# The routes whose request creates one job: their rate check takes the job slot too (`check_rate(job_slot=True)`),
# which saves the create a round trip of its own; the authentication middleware gives it back unless a job was made.
ONE_JOB_ROUTES = frozenset({("POST", "/v1/jobs")})


@dataclass(frozen=True, slots=True)
class RateChecked:
    """What a passed rate check learnt: whether Redis answered (else the rate was counted in this process only and
    the revocation mark was not read), and whether it took one of the tenant's job slots."""

    redis_answered: bool
    job_slot: bool = False


async def check_rate(
    api: Api,
    tenant: Tenant,
    *,
    units: int = 1,
    revoked_mark: str | None = None,
    on_revoked: Callable[[], None] | None = None,
    job_slot: bool = False,
) -> RateChecked:
    """429 with Retry-After when the tenant spent more than its requests per second in this second; a request
    costs `units` (an expensive read is charged as several requests). With `revoked_mark`, the same round trip
    asks whether the caller's key was revoked (401, `on_revoked` first); with `job_slot` too, it takes one of the
    tenant's job slots if one is free and its counter is seeded (else the create takes it, `take_job_slot`)."""
    limit = tenant.requests_per_s or api.settings.api.requests_per_s
    now = api.clock()
    key = api.redis.key("rate", tenant.tenant_id, str(int(now.timestamp())))
    keys = [key] if revoked_mark is None else [key, revoked_mark]
    args = [units]
    if job_slot and revoked_mark is not None:
        keys.append(api.redis.key("jobs", tenant.tenant_id))
        args += [limit, tenant.max_jobs or api.settings.api.max_jobs_per_tenant]
    try:
        api.local.ask_redis()
        answers = await api.redis.run_script(COUNT_REQUEST, keys, args)
    except REDIS_DOWN as exc:
        api.local.without_redis("rate", exc)
        used = api.local.count(("rate", tenant.tenant_id), int(now.timestamp()), units)
        _refuse_above(used, limit, now.microsecond)
        return RateChecked(redis_answered=False)
    if revoked_mark is not None and answers[1]:
        if on_revoked is not None:
            on_revoked()
        raise Unauthorized("the API key is unknown or revoked")
    _refuse_above(int(answers[0]), limit, now.microsecond)
    return RateChecked(redis_answered=True, job_slot=int(answers[2]) == 1)


def _refuse_above(used: int, limit: int, microsecond: int) -> None:
    if used > limit:
        raise QuotaExceeded(f"more than {limit} requests per second; slow down", retry_after_s=1.0 - microsecond / 1e6)


# One round trip per create (or per batch of creates): take up to ARGV[2] job slots under the limit ARGV[1].
TAKE_JOB_SLOTS = _TAKE_SLOTS + "return take_slots(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))\n"


MAX_PREVIEW = 100
# 100 fires cost 2-7 ms of search (benchmarks/preview_bench.py): at 2 fires per request unit, the default 200
# requests/s let one tenant take at most 4 full previews a second (~25 ms of event loop), not 200.
PREVIEW_FIRES_PER_UNIT = 2


async def charge_preview(api: Api, tenant: Tenant, count: int) -> None:
    """Charge a preview of `count` fires against the tenant's rate (429 when it does not fit this second)."""
    await check_rate(api, tenant, units=math.ceil(count / PREVIEW_FIRES_PER_UNIT))


async def take_job_slot(api: Api, tenant: Tenant) -> None:
    """Count one more job for the tenant, or 422 when it already has its maximum."""
    if await take_job_slots(api, tenant, 1) < 1:
        raise job_quota_exceeded(api, tenant)


def job_quota_exceeded(api: Api, tenant: Tenant) -> JobQuotaExceeded:
    limit = tenant.max_jobs or api.settings.api.max_jobs_per_tenant
    return JobQuotaExceeded(f"the tenant already has its maximum of {limit} jobs; delete some first")


async def take_job_slots(api: Api, tenant: Tenant, wanted: int) -> int:
    """Count up to `wanted` more jobs for the tenant in one round trip (a batch create's items): how many fit under
    its maximum and were counted. Give back the ones not used (`give_back_job_slots`)."""
    limit = tenant.max_jobs or api.settings.api.max_jobs_per_tenant
    key = api.redis.key("jobs", tenant.tenant_id)
    try:
        api.local.ask_redis()
        taken = int(await api.redis.run_script(TAKE_JOB_SLOTS, [key], [limit, wanted]))
        if taken == -1:  # the counter is gone (Redis restarted): seed it from Cassandra's count
            seed = await api.local.count_once(tenant.tenant_id, lambda: api.store.count_jobs(tenant.tenant_id))
            await api.redis.set_if_absent(key, seed)
            taken = int(await api.redis.run_script(TAKE_JOB_SLOTS, [key], [limit, wanted]))
    except REDIS_DOWN as exc:
        api.local.without_redis("job_slots", exc)
        taken = await _take_local_job_slots(api, tenant.tenant_id, limit, wanted)
    return max(taken, 0)


async def _take_local_job_slots(api: Api, tenant_id: str, limit: int, wanted: int) -> int:
    """The job count without Redis: Cassandra's (the truth), read again after JOB_COUNT_FRESH_S, plus the jobs this
    process created since; how many of `wanted` fit under `limit`."""
    counted = api.local.job_counts.get(tenant_id)
    if counted is None or time.monotonic() - counted[1] > JOB_COUNT_FRESH_S:
        jobs = await api.local.count_once(tenant_id, lambda: api.store.count_jobs(tenant_id))
        counted = api.local.job_counts.get(tenant_id)  # a request that shared the read may have counted on it since
        if counted is None or time.monotonic() - counted[1] > JOB_COUNT_FRESH_S:
            counted = (jobs, time.monotonic())
    taken = max(0, min(wanted, limit - counted[0]))
    api.local.job_counts[tenant_id] = (counted[0] + taken, counted[1])
    return taken


async def give_back_job_slot(api: Api, tenant: Tenant) -> None:
    """One job less for the tenant (a create that did not happen, a delete)."""
    await give_back_job_slots(api, tenant, 1)


async def give_back_job_slots(api: Api, tenant: Tenant, count: int) -> None:
    """`count` jobs less for the tenant (creates that did not happen, a delete). Without Redis the counter keeps
    them (it over-counts until its key is lost and re-seeded): refusing the request for it would be worse."""
    if count <= 0:
        return
    key = api.redis.key("jobs", tenant.tenant_id)
    try:
        api.local.ask_redis()
        await api.redis.decrement(key, count)
    except REDIS_DOWN as exc:
        api.local.without_redis("job_slots", exc)
        counted = api.local.job_counts.get(tenant.tenant_id)
        if counted is not None:
            api.local.job_counts[tenant.tenant_id] = (max(0, counted[0] - count), counted[1])


def min_interval_s(api: Api, tenant: Tenant) -> int:
    return tenant.min_interval_s or api.settings.api.min_interval_s
