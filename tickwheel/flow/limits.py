"""Flow control in Redis: per-target-host token bucket and concurrency cap, per-tenant concurrency cap, and
circuit breakers. Each check is one Lua script, so workers share the limits atomically.

Concurrency slots are sorted-set members scored with their expiry (the run's lease), so a worker that dies
holding a slot frees it when the lease passes.

Breakers are kept per (tenant, target host), so one tenant cannot open a breaker for the others: any tenant
can make a shared host fail for its own calls (a path that answers 500), and a breaker fed by every tenant
would let it stop everyone's calls, and keep them stopped by taking each half-open probe. A tenant's breaker
counts that tenant's calls in a sliding window of 6 slots; it opens when at least `breaker_min_calls` calls
in `breaker_window_s` were made and more than half failed; once `breaker_open_s` has passed it lets one probe
through at a time (half-open): a successful probe closes it, a failed one opens it again. The host-wide
breaker is derived: a host is open for every tenant while at least `breaker_min_tenants` tenants have their
own breaker open on it, so a host that is really down is spared the calls of tenants that have not yet seen it
fail, and a single tenant (below that count) can never trip it. A denied acquire says why and how long to
wait, so the run is deferred, not tried. Host names are normalised (`canonical_host`) before they key anything.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from typing import Any

from tickwheel import metrics
from tickwheel.egress import canonical_host
from tickwheel.errors import Unavailable
from tickwheel.flow.redis import ASK_AGAIN_AFTER_S, REDIS_DOWN, AwayGate, RedisAway, RedisClient
from tickwheel.settings import WorkerSettings

log = logging.getLogger(__name__)

BREAKER_SLOTS = 6

ACQUIRE = """
local tenant_slots, host_slots, bucket, breaker = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local probe, open_tenants = KEYS[5], KEYS[6]
local now, token = tonumber(ARGV[1]), ARGV[2]
local tenant_cap, host_cap = tonumber(ARGV[3]), tonumber(ARGV[4])
local rate, burst, hold = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local min_tenants = tonumber(ARGV[8])
local is_probe = 0
local open_until = tonumber(redis.call('HGET', breaker, 'open_until') or '0')
if open_until > 0 then
  if now < open_until then return {0, 'breaker_open', open_until - now, 0} end
  if not redis.call('SET', probe, token, 'NX', 'PX', hold) then return {0, 'breaker_half_open', 1000, 0} end
  is_probe = 1
else
  redis.call('ZREMRANGEBYSCORE', open_tenants, '-inf', now)
  if redis.call('ZCARD', open_tenants) >= min_tenants then
    local first = redis.call('ZRANGE', open_tenants, 0, 0, 'WITHSCORES')
    return {0, 'host_breaker_open', tonumber(first[2]) - now, 0}
  end
end
local function refuse(reason, wait)
  if is_probe == 1 then redis.call('DEL', probe) end
  return {0, reason, wait, 0}
end
redis.call('ZREMRANGEBYSCORE', tenant_slots, '-inf', now)
redis.call('ZREMRANGEBYSCORE', host_slots, '-inf', now)
if redis.call('ZCARD', tenant_slots) >= tenant_cap then return refuse('tenant_concurrency', 0) end
if redis.call('ZCARD', host_slots) >= host_cap then return refuse('target_concurrency', 0) end
local state = redis.call('HMGET', bucket, 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local last = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - last) * rate / 1000)
if tokens < 1 then
  redis.call('HSET', bucket, 'tokens', tokens, 'ts', now)
  return refuse('target_rate', math.ceil((1 - tokens) * 1000 / rate))
end
redis.call('HSET', bucket, 'tokens', tokens - 1, 'ts', now)
redis.call('PEXPIRE', bucket, math.ceil(burst * 1000 / rate) + 1000)
redis.call('ZADD', tenant_slots, now + hold, token)
redis.call('PEXPIRE', tenant_slots, hold * 2)
redis.call('ZADD', host_slots, now + hold, token)
redis.call('PEXPIRE', host_slots, hold * 2)
return {1, '', 0, is_probe}
"""

RELEASE = """
local tenant_slots, host_slots, breaker, probe, open_tenants = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now, token, outcome, is_probe = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local window, min_calls, open_ms = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local tenant = ARGV[8]
redis.call('ZREM', tenant_slots, token)
redis.call('ZREM', host_slots, token)
if outcome == 'none' then
  if is_probe == '1' and redis.call('GET', probe) == token then redis.call('DEL', probe) end
  return 'unchanged'
end
local failed = outcome == 'failed'
local function open()
  redis.call('DEL', breaker)
  redis.call('HSET', breaker, 'open_until', now + open_ms)
  redis.call('PEXPIRE', breaker, open_ms * 10 + window)
  redis.call('ZADD', open_tenants, now + open_ms, tenant)
  redis.call('PEXPIRE', open_tenants, open_ms * 2)
  return 'opened'
end
if is_probe == '1' then
  redis.call('DEL', probe)
  if failed then return open() end
  redis.call('DEL', breaker)
  redis.call('ZREM', open_tenants, tenant)
  return 'closed'
end
if redis.call('HEXISTS', breaker, 'open_until') == 1 then return 'open' end
local slot_ms = math.ceil(window / 6)
local slot = math.floor(now / slot_ms)
redis.call('HINCRBY', breaker, 'c:' .. slot, 1)
if failed then redis.call('HINCRBY', breaker, 'f:' .. slot, 1) end
local fields = redis.call('HGETALL', breaker)
local calls, fails = 0, 0
for i = 1, #fields, 2 do
  local key, n = fields[i], tonumber(fields[i + 1])
  local at = tonumber(string.sub(key, 3))
  if at and at <= slot - 6 then
    redis.call('HDEL', breaker, key)
  elseif string.sub(key, 1, 2) == 'c:' then calls = calls + n
  elseif string.sub(key, 1, 2) == 'f:' then fails = fails + n end
end
redis.call('PEXPIRE', breaker, window * 2)
if calls >= min_calls and fails * 2 > calls then return open() end
return 'closed'
"""


@dataclass(frozen=True, slots=True)
class Permit:
    """A granted slot; hand it back with `release` when the call ended."""

    token: str
    tenant: str
    host: str
    probe: bool


@dataclass(frozen=True, slots=True)
class Denied:
    """Why a call may not start now and how long to wait before trying again."""

    reason: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class Caps:
    """The limits one call is checked against (tenant and job overrides already applied)."""

    tenant_concurrency: int
    target_concurrency: int
    target_rate_per_s: float
    hold_s: float  # how long a slot is held at most: the run's lease


def tightened(default: float, own: float | None) -> float:
    """A job's own limit where it is stricter than the worker's default; unset, zero or negative (a job
    stored before the API refused those) leaves the default, so no job can make its runs wait forever."""
    return min(default, own) if own is not None and own > 0 else default


class FlowLimits:
    """The flow checks of one worker process on the shared Redis."""

    def __init__(self, settings: WorkerSettings, redis: RedisClient):
        self.settings = settings
        self.redis = redis
        self.away = AwayGate()

    def _keys(self, tenant: str, host: str) -> dict[str, str]:
        host = canonical_host(host)
        return {
            "tenant": self.redis.key("tenant", tenant, "slots"),
            "host": self.redis.key("host", host, "slots"),
            "bucket": self.redis.key("host", host, "bucket"),
            "breaker": self.redis.key("host", host, "breaker", tenant),
            "probe": self.redis.key("host", host, "probe", tenant),
            "open_tenants": self.redis.key("host", host, "open-tenants"),
        }

    async def acquire(self, tenant: str, host: str, caps: Caps, now_ms: int) -> Permit | Denied:
        """A slot for one call to `host` by `tenant`, or why not. Redis down: the call goes ahead unlimited
        (the limits protect targets; they must not stop the execution path)."""
        k = self._keys(tenant, host)
        token = f"{random.getrandbits(128):032x}"  # unique among the slots held; uuid4 read the kernel's source
        rate = max(caps.target_rate_per_s, 0.001)
        hold_ms = max(1, math.ceil(caps.hold_s * 1000))
        args: list[str | int | float] = [now_ms, token, caps.tenant_concurrency, caps.target_concurrency, rate]
        args += [max(rate, 1.0), hold_ms, self.settings.breaker_min_tenants]
        keys = [k["tenant"], k["host"], k["bucket"], k["breaker"], k["probe"], k["open_tenants"]]
        try:
            self.away.ask()
            allowed, reason, wait_ms, probe = await self.redis.run_script(ACQUIRE, keys, args)
        except REDIS_DOWN as exc:
            self._without_redis("acquire", exc)
            return Permit(token, tenant, host, probe=False)
        if not allowed:
            return Denied(_text(reason), float(wait_ms) / 1000)
        return Permit(token, tenant, host, probe=bool(probe))

    async def release(self, permit: Permit, failed: bool | None, now_ms: int) -> str:
        """Free the slot and feed the breaker (`failed` None: the call never reached the target)."""
        k = self._keys(permit.tenant, permit.host)
        outcome = "none" if failed is None else ("failed" if failed else "ok")
        s = self.settings
        args: list[Any] = [now_ms, permit.token, outcome, "1" if permit.probe else "0"]
        args += [int(s.breaker_window_s * 1000), s.breaker_min_calls, int(s.breaker_open_s * 1000), permit.tenant]
        keys = [k["tenant"], k["host"], k["breaker"], k["probe"], k["open_tenants"]]
        try:
            self.away.ask()
            result = await self.redis.run_script(RELEASE, keys, args)
        except REDIS_DOWN as exc:
            self._without_redis("release", exc)
            return "unknown"
        state = _text(result)
        if state == "opened":
            log.warning("circuit breaker opened for tenant %s on target %s", permit.tenant, permit.host)
        return state

    def _without_redis(self, step: str, exc: BaseException) -> None:
        """Redis did not answer an acquire (the call goes ahead unlimited) or a release (the slot expires with its
        lease): counted; logged only when Redis was asked, not while it is skipped (`AwayGate`)."""
        metrics.backend_errors.labels("redis").inc()
        metrics.redis_fail_open.labels(f"flow_{step}").inc()
        if not isinstance(exc, RedisAway):
            log.warning("flow limits unavailable (%s without them for %.0f s): %s", step, ASK_AGAIN_AFTER_S, exc)
        self.away.failed(exc)

    async def breaker_open_until_ms(self, tenant: str, host: str) -> int | None:
        """When the tenant's breaker on `host` stops refusing (None: closed)."""
        try:
            value = await self.redis.hash_field(self._keys(tenant, host)["breaker"], "open_until")
        except REDIS_DOWN as exc:
            raise Unavailable(f"Redis is unavailable: {exc}") from exc
        return int(value) if value is not None else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
