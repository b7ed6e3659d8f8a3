"""Runs outside the schedule: trigger now (POST /v1/jobs/{job_id}/trigger).

A triggered run is a run like any other (same rows, same worker path) with its own id
(`core.ids.requested_run_id`), `origin` 'trigger' in its row and the history, and no place in the chain: the
dispatcher sees its id is not the schedule's occurrence and chains nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from tickwheel.core.errors import ScheduleError
from tickwheel.core.ids import requested_run_id
from tickwheel.core.instants import parse_instant
from tickwheel.errors import Conflict, InvalidInput
from tickwheel.store import runs as run_store
from tickwheel.store.buckets import due_run_for
from tickwheel.store.jobs import Job, JobState, run_of
from tickwheel.store.runs import NewRun

from .context import api_of
from .idempotency import idempotent
from .jobs import job_for_tenant
from .planning import to_ms
from .responses import json_response
from .wire import field_of, instant, parse_json

log = logging.getLogger(__name__)
routes = web.RouteTableDef()

TRIGGER_AHEAD = timedelta(days=7)  # bucket rows live 14 days; a trigger is "now", not a second schedule
TRIGGER_PAST_SLACK = timedelta(minutes=5)  # an `at` a little behind the server's clock means now

Body = TypeVar("Body", bound=msgspec.Struct)


class TriggerBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """POST /v1/jobs/{job_id}/trigger: when (default now) and whether a paused job runs it."""

    at: str | None = None
    force: bool = False


def decode_as(body: bytes, kind: type[Body]) -> Body:
    """An optional JSON object body as `kind` (an empty body is `kind()`); 422 naming the field at fault."""
    if not body.strip():
        return kind()
    document: Any = parse_json(body)
    if not isinstance(document, dict):
        raise InvalidInput("the body must be a JSON object")
    try:
        return msgspec.convert(document, type=kind, str_keys=True)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc), field=field_of(str(exc))) from None


def body_instant(text: str, field: str) -> datetime:
    """An instant the client sent in a body field (422 naming it)."""
    try:
        return parse_instant(text, field=field)
    except ScheduleError as exc:
        raise InvalidInput(exc.message, field=field) from None


@routes.post("/v1/jobs/{job_id}/trigger")
async def trigger(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _trigger(request, body))


async def _trigger(request: web.Request, body: bytes) -> web.Response:
    api = api_of(request)
    asked = decode_as(body, TriggerBody)
    job = await job_for_tenant(request)
    now = api.clock()
    at = to_ms(_trigger_at(asked, now))
    _check_state(job, asked.force)
    run = requested_run(job, "trigger", at, forced=asked.force)
    await run_store.create_run(api.store, run, now)
    await api.near.announce_if_near(due_run_for(run), now)
    log.info("run triggered", extra={"tenant": job.tenant_id, "job_id": job.job_id, "run_id": run.run_id})
    return json_response(run_summary(run), status=201, location=f"/v1/runs/{run.run_id}")


def _trigger_at(asked: TriggerBody, now: datetime) -> datetime:
    if asked.at is None:
        return now
    at = body_instant(asked.at, "at")
    if at < now - TRIGGER_PAST_SLACK:
        raise InvalidInput("at is in the past; to run past occurrences use backfill", field="at")
    if at > now + TRIGGER_AHEAD:
        raise InvalidInput(f"at must be within {TRIGGER_AHEAD.days} days from now", field="at")
    return max(at, now)


def _check_state(job: Job, force: bool) -> None:
    if job.state is JobState.DELETED:
        raise Conflict("the job is deleted")
    if job.state is JobState.PAUSED and not force:
        raise Conflict('the job is paused; send "force": true to run it anyway', field="force")


def requested_run(job: Job, origin: str, at: datetime, *, forced: bool = False) -> NewRun:
    """A run of `job` made on request for the instant `at`, with its own id and its origin."""
    run = run_of(job, at, run_id=requested_run_id(job.job_id, origin, at))
    return dataclasses.replace(run, origin=origin, forced=forced)


def run_summary(run: NewRun) -> dict[str, Any]:
    """A run just made on request, as the answer shows it."""
    return {
        "id": str(run.run_id),
        "job_id": str(run.job_id),
        "status": "SCHEDULED",
        "scheduled_at": instant(run.scheduled_at),
        "origin": run.origin,
        "forced": run.forced,
    }
