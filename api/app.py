"""The aiohttp application: middlewares (errors outermost, then admission control, then authentication) and the
routes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from aiohttp import web

from tickwheel.bus.kafka import KafkaProducer
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.ports import ApiStore

from . import backfill, batch, console, dead_letters, history, jobs, meta, named, operator, runs, schedules, upcoming
from .admission import ADMISSION, Admission, admission, lag_probe, policy_of
from .auth import authenticate
from .context import API, Api, utc_now
from .problems import problems

BODY_OVERHEAD_BYTES = 64 * 1024
# Every route table, in match order: /v1/jobs/by-name/{name} (named) before /v1/jobs/{job_id}/... (jobs)
ROUTE_TABLES = (
    meta.routes,
    named.routes,
    schedules.routes,
    backfill.routes,
    batch.routes,
    jobs.routes,
    runs.routes,
    dead_letters.routes,
    upcoming.routes,
    operator.routes,
    history.routes,
)


def make_app(
    settings: Settings,
    store: ApiStore,
    producer: KafkaProducer,
    redis: RedisClient,
    *,
    clock: Callable[[], datetime] = utc_now,
    gate: Admission | None = None,
    ahead: KafkaProducer | None = None,
) -> web.Application:
    """The API on these collaborators; `gate` replaces the admission control the settings would make (tests);
    `ahead` announces the rows due seconds ahead (`Api.ahead`)."""
    # Bodies may carry the largest payload JSON-escaped (up to 6 bytes per byte in the worst case is not
    # worth allowing; twice the payload plus the rest of the definition is).
    app = web.Application(
        # Admission inside `problems` (shed answers are problem+json and counted) and before `authenticate`: a shed
        # request costs no Redis or Cassandra read.
        middlewares=[problems, admission, authenticate],
        client_max_size=2 * settings.api.max_payload_bytes + BODY_OVERHEAD_BYTES,
    )
    app[API] = Api(settings, store, producer, redis, clock, ahead)
    app[ADMISSION] = gate or Admission(policy_of(settings.api))
    app.cleanup_ctx.append(lag_probe)
    for table in ROUTE_TABLES:
        app.add_routes(table)
    console.install(app)
    return app
