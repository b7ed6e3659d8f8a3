"""Bearer API keys -> tenant, then the tenant's request rate; both before any handler runs.

Hostile callers are kept cheap: a key that failed is remembered in-process for `api.auth_negative_cache_s`,
and failures are counted in Redis per client address and per key prefix; past `api.auth_failures_per_min`
either way, the caller gets 429 + Retry-After before any database read. A checked key is trusted in-process
for `api.auth_cache_s`, but every request also asks Redis (in the same round trip as the rate quota) whether
the key was revoked since: `revoke_everywhere` marks it, so a revocation holds on every API process at the
caller's next request, not after the cache expires. A request that creates a job takes its job slot in that
round trip too (`quotas.ONE_JOB_ROUTES`); the slot is given back here unless the handler made the job with it.

Redis holds limits, not truth: while it does not answer, requests are not refused for it. The rate and the
failure counts are kept in this process (`api.local`), and without the revocation mark a key is trusted only as
long as its row was read from Cassandra in the last REVOKED_WITHOUT_REDIS_S (the row's `revoked_at` is the truth
the mark only speeds up).
"""

from __future__ import annotations

import math
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from tickwheel.errors import QuotaExceeded, Unauthorized
from tickwheel.flow.redis import REDIS_DOWN, RedisAway, RedisClient
from tickwheel.store import tenants
from tickwheel.store.tenants import Tenant

from . import quotas
from .context import HELD_JOB_SLOT, KEY_ID, TENANT, Api, api_of
from .quotas import check_rate

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})
FAILURE_WINDOW_S = 60
KEY_PREFIX_CHARS = 10  # "tw_" + 7 characters: throttles guessing around one key without naming it
REVOKED_MARK_TTL_S = 86_400  # far longer than any key cache
CACHE_MAX = 10_000
REVOKED_WITHOUT_REDIS_S = 5.0  # how old a key's Cassandra read may be while Redis (the revocation mark) is away
# The console's static files hold no data; operator routes check the operator key themselves (api.operator).
NO_TENANT_PREFIXES = ("/console", "/v1/operator/")


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in PUBLIC_PATHS or request.path.startswith(NO_TENANT_PREFIXES):
        return await handler(request)
    api = api_of(request)
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized("send your API key as `Authorization: Bearer <key>`")
    tenant = await tenant_for_key(api, key, request.remote or "-")
    request[TENANT] = tenant
    request[KEY_ID] = key_id_of(key)
    mark = revoked_mark(api.redis, key_id_of(key))
    route = request.match_info.route.resource
    one_job = route is not None and (request.method, route.canonical) in quotas.ONE_JOB_ROUTES
    checked = await check_rate(api, tenant, revoked_mark=mark, on_revoked=lambda: forget(api, key), job_slot=one_job)
    if not checked.redis_answered:
        api.local.without_redis("revocation", RedisAway("the rate check found Redis away"))  # counted, not again
        await tenant_for_key(api, key, request.remote or "-", max_age_s=REVOKED_WITHOUT_REDIS_S)
    if not checked.job_slot:
        return await handler(request)
    request[HELD_JOB_SLOT] = True
    try:
        return await handler(request)
    finally:
        if request[HELD_JOB_SLOT]:  # no job was made with it (a refused body, a replay, a failed write)
            await quotas.give_back_job_slot(api, tenant)


def key_id_of(key: str) -> str:
    """The id a key is listed and revoked by (the first 12 hex digits of its hash), as the store makes it."""
    return tenants.key_id_of(tenants.hash_key(key))


def revoked_mark(redis: RedisClient, key_id: str) -> str:
    return redis.key("revoked-key", key_id)


async def revoke_everywhere(redis: RedisClient, key_ids: list[str]) -> None:
    """Tell every API process that these keys are revoked (their caches are checked against the mark)."""
    async with redis.pipeline() as pipe:
        for key_id in key_ids:
            pipe.set(revoked_mark(redis, key_id), 1, ex=REVOKED_MARK_TTL_S)
        await pipe.execute()


def forget(api: Api, key: str) -> None:
    api.key_cache.pop(tenants.hash_key(key), None)


async def tenant_for_key(api: Api, key: str, client: str, *, max_age_s: float | None = None) -> Tenant:
    """The tenant owning `key`, or 401 (429 once this client or key prefix failed too often); with `max_age_s`,
    a cached answer older than that is read again."""
    key_hash = tenants.hash_key(key)
    now = time.monotonic()
    cached = api.key_cache.get(key_hash)
    cache_s = api.settings.api.auth_cache_s
    if cached is not None and cached[1] > now and (max_age_s is None or cached[1] - cache_s >= now - max_age_s):
        return cached[0]
    if api.failed_keys.get(key_hash, 0.0) > now:
        await _count_failure(api, key, client)
        raise Unauthorized("the API key is unknown or revoked")
    await _refuse_if_throttled(api, key, client)
    tenant_id = await api.store.authenticate(key)
    tenant = None if tenant_id is None else await api.store.get_tenant(tenant_id)
    if tenant is None:
        _remember(api.failed_keys, key_hash, now + api.settings.api.auth_negative_cache_s)
        await _count_failure(api, key, client)
        raise Unauthorized("the API key is unknown or revoked")
    if cache_s > 0:
        if len(api.key_cache) > CACHE_MAX:
            api.key_cache.clear()
        api.key_cache[key_hash] = (tenant, now + cache_s)
    return tenant


def _remember(failed: dict[str, float], key_hash: str, until: float) -> None:
    if len(failed) > CACHE_MAX:
        failed.clear()
    failed[key_hash] = until


def _failure_names(key: str, client: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return ("auth-fail", "client", client), ("auth-fail", "prefix", key[:KEY_PREFIX_CHARS])


def _failure_window(api: Api) -> int:
    return int(api.clock().timestamp()) // FAILURE_WINDOW_S


def _failure_keys(api: Api, key: str, client: str) -> list[str]:
    window = str(_failure_window(api))
    return [api.redis.key(*name, window) for name in _failure_names(key, client)]


async def _refuse_if_throttled(api: Api, key: str, client: str) -> None:
    try:
        api.local.ask_redis()
        counts: list[bytes | str | int | None] = list(await api.redis.get_many(_failure_keys(api, key, client)))
    except REDIS_DOWN as exc:
        api.local.without_redis("auth_failures", exc)
        counts = [api.local.peek(name, _failure_window(api)) for name in _failure_names(key, client)]
    limit = api.settings.api.auth_failures_per_min
    if any(int(count or 0) >= limit for count in counts):
        wait_s = FAILURE_WINDOW_S - api.clock().timestamp() % FAILURE_WINDOW_S
        raise QuotaExceeded(
            f"more than {limit} failed authentications a minute from this client or for this key prefix",
            retry_after_s=math.ceil(wait_s),
        )


async def _count_failure(api: Api, key: str, client: str) -> None:
    async def count() -> object:
        async with api.redis.pipeline() as pipe:
            for name in _failure_keys(api, key, client):
                pipe.incr(name)
                pipe.expire(name, FAILURE_WINDOW_S * 2)
            return await pipe.execute()

    try:
        api.local.ask_redis()
        await count()
    except REDIS_DOWN as exc:
        api.local.without_redis("auth_failures", exc)
        for name in _failure_names(key, client):
            api.local.count(name, _failure_window(api))
