"""What is coming for a tenant: its runs due per minute or hour (`/v1/due-counts`) and the fires of a schedule
that is not saved yet (`/v1/schedules/preview`, the create form's live preview)."""

from __future__ import annotations

import asyncio
import functools
from datetime import timedelta
from typing import Any

import msgspec
from aiohttp import web

from schemas.messages import ScheduleDoc
from tickwheel.core.instants import whole_ms
from tickwheel.core.load import DueCounts, due_counts
from tickwheel.errors import InvalidInput
from tickwheel.model import schedule_of
from tickwheel.store.jobs import Job, JobState

from . import quotas
from .context import Api, api_of, tenant_of
from .responses import json_response, preview_document
from .validation import check_schedule
from .wire import field_of, instant, parse_json

routes = web.RouteTableDef()
# resolution -> (bucket seconds, buckets): per minute over the next 2 hours, per hour over the next 7 days
RESOLUTIONS = {"minute": (60, 120), "hour": (3600, 168)}
# About 40 µs a step on this box: the projection of one request stays under a second.
MAX_STEPS = 20_000
MAX_JOBS = 2_000
JOB_PAGE = 500


class PreviewBody(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """A schedule as in a job body, and how many fires to show."""

    schedule: ScheduleDoc
    count: int = 10


@routes.get("/v1/due-counts")
async def get_due_counts(request: web.Request) -> web.Response:
    """The tenant's ACTIVE jobs projected over the window, counted per bucket."""
    api, tenant = api_of(request), tenant_of(request)
    resolution = request.query.get("resolution", "minute")
    if resolution not in RESOLUTIONS:
        raise InvalidInput("resolution must be minute or hour", field="resolution")
    bucket_s, buckets = RESOLUTIONS[resolution]
    now = api.clock()
    start = now.replace(second=0, microsecond=0) if bucket_s == 60 else now.replace(minute=0, second=0, microsecond=0)
    found, more_jobs = await _active_jobs(api, tenant.tenant_id)
    schedules = [(schedule_of(job.definition), job.fired_count) for job in found]
    counts = await asyncio.to_thread(
        functools.partial(due_counts, max_steps=MAX_STEPS, since=now), schedules, start, bucket_s, buckets
    )
    return json_response(_counts_document(counts, more_jobs))


async def _active_jobs(api: Api, tenant_id: str) -> tuple[list[Job], bool]:
    """The tenant's ACTIVE jobs, at most MAX_JOBS; and whether there were more."""
    found: list[Job] = []
    cursor = None
    while len(found) < MAX_JOBS:
        ids, cursor = await api.store.list_job_ids(tenant_id, limit=JOB_PAGE, cursor=cursor, state="ACTIVE")
        jobs = await asyncio.gather(*(api.store.get_job(job_id) for job_id in ids))
        found += [job for job in jobs if job is not None and job.state is JobState.ACTIVE]
        if cursor is None:
            return found, False
    return found[:MAX_JOBS], True


def _counts_document(counts: DueCounts, more_jobs: bool) -> dict[str, Any]:
    return {
        "start": instant(counts.start),
        "bucket_s": counts.bucket_s,
        "counts": list(counts.counts),
        "jobs_counted": counts.schedules,
        "truncated": counts.truncated or more_jobs,
    }


@routes.post("/v1/schedules/preview")
async def preview_schedule(request: web.Request) -> web.Response:
    """The next fires of a schedule, checked exactly as a create would check it (422 naming the field)."""
    api, tenant = api_of(request), tenant_of(request)
    document = parse_json(await request.read())
    if not isinstance(document, dict):
        raise InvalidInput("the body must be a JSON object")
    try:
        body = msgspec.convert(document, type=PreviewBody, str_keys=True)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc).split(" - at ")[0], field=field_of(str(exc))) from None
    if not 1 <= body.count <= quotas.MAX_PREVIEW:
        raise InvalidInput(f"count must be from 1 to {quotas.MAX_PREVIEW}", field="count")
    await quotas.charge_preview(api, tenant, body.count)
    now = api.clock()
    doc = body.schedule
    if doc.type == "interval" and doc.anchor_at is None:
        doc = msgspec.structs.replace(doc, anchor_at=doc.start_at or instant(whole_ms(now)))
    schedule = check_schedule(doc, quotas.min_interval_s(api, tenant))
    return json_response(preview_document(schedule, now - timedelta(microseconds=1), body.count, doc.tz))
