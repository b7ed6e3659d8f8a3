"""POST /v1/jobs/{job_id}/backfill: the runs the schedule would have made in a past range, made now.

Each backfilled run has its own id (`core.ids.requested_run_id(job, 'backfill', occurrence)`), so it never
collides with the schedule's own run of that occurrence and a repeated backfill of the same range writes nothing
new; `origin` is 'backfill' in its row and the history; it runs at its occurrence's scheduled time (the headers
and templates carry that instant) but fires now, spread over the job's delay tolerance (core.backfill).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime

import msgspec
from aiohttp import web

from tickwheel.core.backfill import MAX_COUNTED, plan_backfill
from tickwheel.core.specs import CronSchedule, IntervalSchedule
from tickwheel.errors import Conflict, InvalidInput
from tickwheel.model import schedule_of
from tickwheel.store import runs as run_store
from tickwheel.store.buckets import due_run_for
from tickwheel.store.jobs import JobState

from . import audit
from .context import api_of, run_retention_s
from .idempotency import idempotent
from .jobs import job_for_tenant
from .responses import json_response
from .schedules import body_instant, decode_as, requested_run, run_summary
from .wire import instant

routes = web.RouteTableDef()
MAX_BACKFILL = 1000
WRITES_IN_FLIGHT = 32


class BackfillBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The past range [from, to) to backfill; `dryRun` answers the instants and writes nothing."""

    from_: str = msgspec.field(name="from")
    to: str
    dry_run: bool = False


@routes.post("/v1/jobs/{job_id}/backfill")
async def backfill(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _backfill(request, body))


async def _backfill(request: web.Request, body: bytes) -> web.Response:
    api = api_of(request)
    if not body.strip():
        raise InvalidInput("send from and to: the past range to backfill", field="from")
    asked = decode_as(body, BackfillBody)
    start, end = body_instant(asked.from_, "from"), body_instant(asked.to, "to")
    now = api.clock()
    if end <= start:
        raise InvalidInput("to must be after from", field="to")
    if end > now:
        raise InvalidInput("to must not be in the future: backfill makes the runs of a past range", field="to")
    job = await job_for_tenant(request)
    if job.state is not JobState.ACTIVE:
        raise Conflict(f"the job is {job.state.value.lower()}; backfill runs only for an active job")
    schedule = schedule_of(job.definition)
    if not isinstance(schedule, CronSchedule | IntervalSchedule):
        raise Conflict("a once job has no occurrences to backfill")
    plan = plan_backfill(schedule, start, end, now, tolerance_s=job.definition.delay_tolerance_s, limit=MAX_BACKFILL)
    if plan.over_limit:
        many = f"more than {MAX_COUNTED}" if plan.counted > MAX_COUNTED else str(plan.counted)
        raise InvalidInput(
            f"the range holds {many} occurrences; at most {MAX_BACKFILL} per call (split the range)", field="to"
        )
    retention_s = run_retention_s(request)
    made = [
        dataclasses.replace(requested_run(job, "backfill", r.scheduled_at, retention_s), fire_at=r.fire_at)
        for r in plan.runs
    ]
    if not asked.dry_run:
        await _write(request, made, now)
        detail = {"from": instant(start), "to": instant(end), "count": len(made)}
        await audit.record(request, "backfill", job, job, detail)
    runs = [{**run_summary(run), "fire_at": instant(run.fire_at)} for run in made]
    document = {"dry_run": asked.dry_run, "count": len(runs), "runs": runs}
    return json_response(document, status=200 if asked.dry_run else 201)


async def _write(request: web.Request, made: list[run_store.NewRun], now: datetime) -> None:
    """Every run durable before the answer (a bounded number of writes in flight)."""
    api = api_of(request)
    gate = asyncio.Semaphore(WRITES_IN_FLIGHT)

    async def write(run: run_store.NewRun) -> None:
        async with gate:
            await api.store.create_run(run, now)
            api.near.announce_if_near(due_run_for(run), now)

    await asyncio.gather(*(write(run) for run in made))
