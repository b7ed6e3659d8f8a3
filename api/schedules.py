"""Runs outside the schedule and changes to it that keep the expression: trigger now, skip, pause until.

Skip and pause-until change only the schedule document's `skip` list and `pausedUntil` (the time core passes
over skipped occurrences and fires nothing before the pause's end), through the same versioned change as PATCH.

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

from schemas.messages import ScheduleDoc
from tickwheel.core.errors import ScheduleError
from tickwheel.core.ids import requested_run_id
from tickwheel.core.instants import parse_instant, whole_ms
from tickwheel.core.policies import CatchUpPolicy
from tickwheel.core.schedule import catch_up, next_fire, preview
from tickwheel.errors import Conflict, InvalidInput
from tickwheel.model import catch_up_of, schedule_of
from tickwheel.store.buckets import due_run_for
from tickwheel.store.jobs import Job, JobState, occurrence_run, run_of
from tickwheel.store.runs import NewRun

from . import audit
from .context import api_of, run_retention_s
from .idempotency import idempotent
from .jobs import apply_change, expected_version, job_for_tenant, plan_change
from .responses import json_response
from .validation import check_schedule
from .wire import field_of, instant, parse_json

log = logging.getLogger(__name__)
routes = web.RouteTableDef()

TRIGGER_AHEAD = timedelta(days=7)  # bucket rows live 14 days; a trigger is "now", not a second schedule
TRIGGER_PAST_SLACK = timedelta(minutes=5)
ONE_MS = timedelta(milliseconds=1)  # an `at` a little behind the server's clock means now

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
    at = whole_ms(_trigger_at(asked, now))
    _check_state(job, asked.force)
    run = requested_run(job, "trigger", at, run_retention_s(request), forced=asked.force)
    await api.store.create_run(run, now)
    api.near.announce_if_near(due_run_for(run), now)
    detail = {"run_id": str(run.run_id), "at": instant(at), "forced": run.forced}
    await audit.record(request, "trigger", job, job, detail)
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


def requested_run(job: Job, origin: str, at: datetime, retention_s: int, *, forced: bool = False) -> NewRun:
    """A run of `job` made on request for the instant `at`, with its own id and its origin, kept `retention_s`."""
    run = run_of(job, at, run_id=requested_run_id(job.job_id, origin, at), retention_s=retention_s)
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


class SkipBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """POST /v1/jobs/{job_id}/skip: the next `count` occurrences, or one given `occurrence`."""

    count: int | None = None
    occurrence: str | None = None


class PauseBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """POST /v1/jobs/{job_id}/pause: no fire before `until`; then the job goes on by itself."""

    until: str


MAX_SKIP_COUNT = 100
MAX_PAUSE = timedelta(days=366)


@routes.post("/v1/jobs/{job_id}/skip")
async def skip(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _skip(request, body))


async def _skip(request: web.Request, body: bytes) -> web.Response:
    asked = decode_as(body, SkipBody)
    if (asked.count is None) == (asked.occurrence is None):
        raise InvalidInput("send either count or occurrence", field="count")
    if asked.count is not None and not 1 <= asked.count <= MAX_SKIP_COUNT:
        raise InvalidInput(f"count must be from 1 to {MAX_SKIP_COUNT}", field="count")
    asked_at = None if asked.occurrence is None else body_instant(asked.occurrence, "occurrence")
    job = await _recurring_job(request)
    now = api_of(request).clock()
    schedule = schedule_of(job.definition)
    if asked_at is None:
        chosen = [f.at_utc for f in preview(schedule, now, asked.count or 0)]
    else:
        at = asked_at
        if at <= now or next_fire(schedule, at - ONE_MS) != at:
            raise InvalidInput("not an upcoming occurrence of the job's schedule (see its preview)", field="occurrence")
        chosen = [at]
    doc = job.definition.schedule
    kept = [text for text in doc.skip if parse_instant(text) >= now]  # past skips can no longer matter
    added = [text for text in (instant(at) for at in chosen) if text is not None and text not in kept]
    return await _reschedule(request, job, msgspec.structs.replace(doc, skip=kept + added), now)


@routes.post("/v1/jobs/{job_id}/pause")
async def pause_until(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _pause(request, body))


async def _pause(request: web.Request, body: bytes) -> web.Response:
    asked = decode_as(body, PauseBody) if body.strip() else None
    if asked is None:
        raise InvalidInput("send until: the instant the job goes on", field="until")
    now = api_of(request).clock()
    until = body_instant(asked.until, "until")  # before If-Match: an invalid body is a 422 whatever the version
    if not now < until <= now + MAX_PAUSE:
        raise InvalidInput(f"until must be after now and within {MAX_PAUSE.days} days", field="until")
    job = await _recurring_job(request)
    doc = msgspec.structs.replace(job.definition.schedule, paused_until=instant(until))
    response = await _reschedule(request, job, doc, now, state=JobState.ACTIVE)
    await _catch_up_at(request, job, until, now)
    return response


async def _recurring_job(request: web.Request) -> Job:
    job = await job_for_tenant(request)
    if job.state is JobState.DELETED:
        raise Conflict("the job is deleted")
    if job.definition.schedule.type == "once":
        raise Conflict("a once job has one occurrence: pause or delete it instead")
    if "If-Match" in request.headers:
        expected_version(request, job)
    return job


async def _reschedule(
    request: web.Request, job: Job, doc: ScheduleDoc, now: datetime, *, state: JobState | None = None
) -> web.Response:
    """Apply a changed schedule document as PATCH would (versioned LWT, next run moved)."""
    definition = msgspec.structs.replace(job.definition, schedule=doc)
    schedule = check_schedule(definition, min_interval_s=0)  # only what this request added needs checking
    change, run = plan_change(job, state or job.state, definition, schedule, now, run_retention_s(request))
    return await apply_change(request, job, change, run, now)


async def _catch_up_at(request: web.Request, job: Job, until: datetime, now: datetime) -> None:
    """Catch-up `all`: the occurrences the pause passes over (within the job's limits) run at `until`."""
    rule = catch_up_of(job.definition)
    if rule.policy is not CatchUpPolicy.ALL:
        return
    api = api_of(request)
    for at in catch_up(schedule_of(job.definition), now, until, rule.policy, rule.max_count, rule.max_age_s):
        run = occurrence_run(
            job.job_id, job.tenant_id, job.shard, job.version + 1, job.definition, at,
            retention_s=run_retention_s(request),
        )  # fmt: skip
        run = dataclasses.replace(run, fire_at=until)
        await api.store.create_run(run, now)
        api.near.announce_if_near(due_run_for(run), now)
