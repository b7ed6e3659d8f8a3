"""What every handler works with: settings, the store (its port, `ApiStore`), the producer, Redis and the clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web

from tickwheel.bus.kafka import KafkaProducer
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.retention import retention_s
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.ports import ApiStore
from tickwheel.store.tenants import Tenant

from .cursors import CursorSealer
from .local_limits import LocalLimits


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Api:
    settings: Settings
    store: ApiStore
    producer: KafkaProducer
    redis: RedisClient
    clock: Callable[[], datetime] = utc_now
    # the producer of the announcements of rows due seconds ahead (`NearAnnouncer`), when not `producer`
    ahead: KafkaProducer | None = None
    near: NearAnnouncer = field(init=False)
    cursors: CursorSealer = field(init=False)
    # key hash -> (tenant, trusted until monotonic s); a revoked key is refused within settings.api.auth_cache_s
    key_cache: dict[str, tuple[Tenant, float]] = field(default_factory=dict)
    # key hash -> refused until (monotonic s): a wrong key sent again costs no database read
    failed_keys: dict[str, float] = field(default_factory=dict)
    # what stands in for Redis in this process while it does not answer (api.quotas)
    local: LocalLimits = field(default_factory=LocalLimits)

    def __post_init__(self) -> None:
        object.__setattr__(self, "near", NearAnnouncer(self.settings, self.producer, self.ahead))
        object.__setattr__(self, "cursors", CursorSealer.from_secrets(self.settings.api.cursor_secrets))


API = web.AppKey("api", Api)
TENANT = web.RequestKey("tenant", Tenant)
KEY_ID = web.RequestKey("key_id", str)
# Whether the request holds a job slot its rate check took (api.quotas.ONE_JOB_ROUTES) that no create has used yet.
HELD_JOB_SLOT = web.RequestKey("held_job_slot", bool)


def api_of(request: web.Request) -> Api:
    return request.app[API]


def tenant_of(request: web.Request) -> Tenant:
    return request[TENANT]


def run_retention_s(request: web.Request) -> int:
    """How long the caller's runs, attempts and run history are kept past their due time, in seconds: the
    tenant's `retention_days`, else settings.retention.runs_days. Every write of a run's rows carries it."""
    return retention_s(api_of(request).settings.retention.runs_days, tenant_of(request).retention_days)


def key_id_of(request: web.Request) -> str | None:
    """The id of the API key the request was authenticated with (what the audit log names)."""
    return request.get(KEY_ID)
