"""/v1/jobs: create, list, read, change (pause, resume, reschedule, edit), delete, runs, preview."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from schemas.messages import JobDefinition
from tickwheel import metrics
from tickwheel.core.ids import shard_of
from tickwheel.core.instants import whole_ms
from tickwheel.core.schedule import Schedule
from tickwheel.errors import (
    BatchTooLarge,
    Conflict,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    PreconditionRequired,
)
from tickwheel.model import schedule_of
from tickwheel.store import jobs as job_store
from tickwheel.store.buckets import due_run_for
from tickwheel.store.jobs import Job, JobChange, JobState
from tickwheel.store.records import RunStatus
from tickwheel.store.runs import NewRun

from . import audit, quotas
from .context import HELD_JOB_SLOT, Api, api_of, run_retention_s, tenant_of
from .idempotency import HEADER, REPLAYED, KeyedCreate, check_replay, idempotent, keyed_create
from .planning import next_at, resume_at
from .responses import job_document, json_response, list_document, page_limit, path_uuid, preview_document
from .validation import check_definition
from .wire import decode_body, definition_document, instant, parse_json, to_definition

log = logging.getLogger(__name__)

routes = web.RouteTableDef()
PATCH_STATES = {"PAUSED": JobState.PAUSED, "ACTIVE": JobState.ACTIVE}


def parse_definition(api: Api, request: web.Request, document: Any, now: datetime) -> tuple[JobDefinition, Schedule]:
    """A JSON object into a checked definition and its schedule; interval jobs get their anchor now."""
    if not isinstance(document, dict):
        raise InvalidInput("the body must be a JSON object")
    definition = to_definition(decode_body(document), api.settings.api.max_payload_bytes)
    definition = _anchored(definition, now)
    tenant = tenant_of(request)
    schedule = check_definition(
        definition,
        min_interval_s=quotas.min_interval_s(api, tenant),
        kafka_topic_prefix=tenant.topic_prefix,
    )
    return definition, schedule


def _anchored(definition: JobDefinition, now: datetime) -> JobDefinition:
    doc = definition.schedule
    if doc.type != "interval" or doc.anchor_at is not None:
        return definition
    anchor = doc.start_at or instant(whole_ms(now))
    # msgspec structs are changed with msgspec.structs.replace (dataclasses.replace does not apply)
    return msgspec.structs.replace(definition, schedule=msgspec.structs.replace(doc, anchor_at=anchor))


async def _replayed_job(
    api: Api, keyed: KeyedCreate, existing: job_store.KeyedJob, now: datetime, retention_s: int
) -> Job:
    """The same key again: the job it made, after completing its first run's rows if that request died before
    writing them all (a request younger than the store's timeout may still be writing them: 409, try again).

    Its run row alone does not tell: the rows after the job's insert are one logged batch, which may still be in
    the batchlog of a create that timed out (and was unlogged until session 10, when it could apply in part: run 8
    of the soak). So while the run is absent or still SCHEDULED its rows are written again, with the first
    request's own values and time (`complete_keyed_job`: the same batch); a run that has moved on is left alone."""
    check_replay(keyed, existing.request_hash)
    job = existing.job
    if job.version == 1 and job.fired_count == 0 and job.next_run_at is not None and job.next_run_id is not None:
        first = job_store.occurrence_run(
            job.job_id, job.tenant_id, job.shard, 1, job.definition, job.next_run_at, retention_s=retention_s
        )
        run = await api.store.get_run(first.run_id)
        if run is None and (now - job.created_at).total_seconds() < api.settings.cassandra.request_timeout_s:
            raise Conflict(f"a request with this {HEADER} is still in progress", field=HEADER, retry_after_s=1)
        if run is None or run.status is RunStatus.SCHEDULED:
            await api.store.complete_keyed_job(job, first, job.created_at)
    return job


async def earlier_create(request: web.Request, keyed: KeyedCreate | None, now: datetime) -> Job | None:
    """The job an earlier request with this Idempotency-Key made (its replay), or None (no key, or no such job):
    a tenant at its job quota is refused new jobs, not the answer of one it already has."""
    if keyed is None:
        return None
    api = api_of(request)
    existing = await api.store.get_keyed_job(keyed.job_id)
    if existing is None:
        return None
    return await _replayed_job(api, keyed, existing, now, run_retention_s(request))


async def job_for_tenant(request: web.Request) -> Job:
    """The job named in the path (by id, or by name under /v1/jobs/by-name/), if it is the caller's; another
    tenant's job is exactly as absent as none."""
    api, tenant = api_of(request), tenant_of(request)
    name = request.match_info.get("name")
    if name is None:
        job_id: uuid.UUID | None = path_uuid(request, "job_id", "job")
    else:
        claimed = await api.store.name_claim(tenant.tenant_id, name)
        job_id = claimed.job_id if claimed else None
    job = None if job_id is None else await api.store.get_job(job_id)
    if job is None or job.tenant_id != tenant.tenant_id:
        raise NotFound(f"no job {job_id}" if name is None else f"no job named {name!r}")
    return job


@routes.post("/v1/jobs")
async def create_job(request: web.Request) -> web.Response:
    """With an Idempotency-Key the key names the job (`keyed_create`): its one conditional insert is both the
    creation and the idempotency record, so a create costs one LWT, not an idempotency LWT plus the writes."""
    body = await request.read()
    return await _create(request, body, keyed_create(request, body))


async def _create(request: web.Request, body: bytes, keyed: KeyedCreate | None) -> web.Response:
    api = api_of(request)
    now = whole_ms(api.clock())  # what the job row stores, so a replay renders the same document
    definition, schedule = parse_definition(api, request, parse_json(body), now)
    job_id = keyed.job_id if keyed else uuid.uuid4()
    job, replayed = await create(request, definition, schedule, job_id, now, keyed)
    response = json_response(job_document(job), status=201, etag=job.version, location=f"/v1/jobs/{job.job_id}")
    if replayed:
        response.headers[REPLAYED] = "true"
    return response


async def create(
    request: web.Request,
    definition: JobDefinition,
    schedule: Schedule,
    job_id: uuid.UUID,
    now: datetime,
    keyed: KeyedCreate | None = None,
    *,
    slot_taken: bool = False,
) -> tuple[Job, bool]:
    """Write a checked definition as the caller's new job `job_id` with its first run (201 may follow); with
    `keyed`, the same Idempotency-Key again gives the job it made and True (a replay). With `slot_taken`, the
    caller counted the job against the tenant's quota already (a batch, for all its items at once) and gives the
    slot back itself unless this returns a new job."""
    api, tenant = api_of(request), tenant_of(request)
    at = next_at(schedule, now, 0)
    if at is None:
        raise InvalidInput("the schedule has no occurrence from now on", field="schedule")
    shard = shard_of(job_id, api.settings.shards)
    run = job_store.occurrence_run(
        job_id, tenant.tenant_id, shard, 1, definition, at, retention_s=run_retention_s(request)
    )
    job = Job(
        job_id, tenant.tenant_id, shard, JobState.ACTIVE, 1, definition, definition.priority,
        run.scheduled_at, run.run_id, 0, None, None, now, now,
    )  # fmt: skip
    if not slot_taken and not _used_held_slot(request):
        earlier = await _take_slot(request, keyed, now)
        if earlier is not None:
            return earlier, True
    try:
        existing = await _write(request, job, run, now, keyed)
    except BaseException:
        if not slot_taken:
            await quotas.give_back_job_slot(api, tenant)
        raise
    if existing is not None and keyed is not None:
        if not slot_taken:
            await quotas.give_back_job_slot(api, tenant)
        return await _replayed_job(api, keyed, existing, now, run_retention_s(request)), True
    metrics.jobs_created.labels(definition.schedule.type).inc()
    audit.created()
    api.near.announce_if_near(due_run_for(run), now)
    log.debug("job created", extra={"tenant": tenant.tenant_id, "job_id": job_id, "run_id": run.run_id})
    return job, False


def _used_held_slot(request: web.Request) -> bool:
    """Whether the request's rate check took the job's slot already (auth, `quotas.ONE_JOB_ROUTES`); this create
    then owns it (gives it back itself when it makes no job), so the middleware no longer does."""
    held = HELD_JOB_SLOT in request and request[HELD_JOB_SLOT]
    request[HELD_JOB_SLOT] = False
    return held


async def _take_slot(request: web.Request, keyed: KeyedCreate | None, now: datetime) -> Job | None:
    """Count the new job against the tenant's quota (None), or, at the quota, the job an earlier request with the
    same Idempotency-Key made (replayed as it would be below the quota); else the quota's 422."""
    api, tenant = api_of(request), tenant_of(request)
    try:
        await quotas.take_job_slot(api, tenant)
    except quotas.JobQuotaExceeded:
        earlier = await earlier_create(request, keyed, now)
        if earlier is None:
            raise
        return earlier
    return None


async def _write(
    request: web.Request, job: Job, run: NewRun, now: datetime, keyed: KeyedCreate | None
) -> job_store.KeyedJob | None:
    """The new job's rows with its first run and audit row: None once written, else (keyed) the job its id names."""
    api = api_of(request)
    change = audit.creation_change(request, job)
    try:
        if keyed is None:
            await api.store.create_audited_job(job, run, now, change)
            return None
        return await api.store.create_keyed_job(job, run, now, keyed.request_hash, change)
    except BatchTooLarge as exc:  # a keyless create's one logged batch, refused whole: nothing of it was written
        raise PayloadTooLarge(
            "the job's definition is larger than the store's batch size limit allows: send a smaller payload,"
            f" or create the job with an {HEADER} (its rows need no batch)",
            field="payload",
        ) from exc


@routes.get("/v1/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    api, tenant = api_of(request), tenant_of(request)
    state = request.query.get("state")
    if state is not None and state not in ("ACTIVE", "PAUSED"):
        raise InvalidInput("state must be ACTIVE or PAUSED (deleted jobs are not listed)", field="state")
    label = request.query.get("label")
    if label is not None and "=" not in label:
        raise InvalidInput("label filters are key=value", field="label")
    scope = f"jobs|{state}|{label}"
    ids, next_cursor = await api.store.list_job_ids(
        tenant.tenant_id,
        limit=page_limit(request, api.settings.api.page_size_max),
        cursor=api.cursors.unseal(tenant.tenant_id, scope, request.query.get("cursor")),
        state=state,
        label=label,
    )
    found = await asyncio.gather(*(api.store.get_job(job_id) for job_id in ids))
    shown = [job for job in found if job is not None and job.state is not JobState.DELETED]
    # A once job's next run is over once its run finished: that is in its history, not on the job row.
    last = await asyncio.gather(*(_last_run(request, job) for job in shown if job.definition.schedule.type == "once"))
    last_of = dict(zip((job.job_id for job in shown if job.definition.schedule.type == "once"), last, strict=True))
    items = [job_document(job, last_of.get(job.job_id), with_last_run=False) for job in shown]
    return json_response(list_document(items, api.cursors.seal(tenant.tenant_id, scope, next_cursor)))


@routes.get("/v1/jobs/{job_id}")
async def get_job(request: web.Request) -> web.Response:
    """The job, or a 404 once deleted: a deleted job is gone as a resource, though its runs and history stay
    readable under its id until their retention ends."""
    job = await job_for_tenant(request)
    if job.state is JobState.DELETED:
        raise NotFound(f"job {job.job_id} was deleted")
    return json_response(job_document(job, await _last_run(request, job)), etag=job.version)


async def _last_run(request: web.Request, job: Job) -> dict[str, Any] | None:
    """The newest run whose time has come (the scheduled next run is reported as `next_run_at`). The history
    records outcomes; a run it still shows SCHEDULED may have started since, which only its run row tells."""
    store = api_of(request).store
    entries = await store.latest_runs(job.job_id, 5)
    now = api_of(request).clock()
    for entry in entries:
        if entry.scheduled_at > now:
            continue
        if entry.status is RunStatus.SCHEDULED:
            live = await store.get_run(entry.run_id)
            entry = dataclasses.replace(entry, status=live.status, attempt=live.attempt) if live else entry
        if entry.run_id != job.next_run_id or entry.status is not RunStatus.SCHEDULED:
            return {
                "id": str(entry.run_id),
                "status": entry.status.value,
                "attempt": entry.attempt,
                "scheduled_at": instant(entry.scheduled_at),
            }
    return None


def expected_version(request: web.Request, job: Job) -> int:
    """The version in If-Match (428 without it, 412 when it is not the job's)."""
    header = request.headers.get("If-Match")
    if header is None:
        raise PreconditionRequired("send If-Match with the job's ETag (its version)", field="If-Match")
    text = header.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or int(text) != job.version:
        raise PreconditionFailed(f"the job is at version {job.version}, not {text}", field="If-Match")
    return job.version


@routes.patch("/v1/jobs/{job_id}")
async def patch_job(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _patch(request, body))


async def _patch(request: web.Request, body: bytes) -> web.Response:
    api = api_of(request)
    document = parse_json(body)
    if not isinstance(document, dict):
        raise InvalidInput("the body must be a JSON object")
    job = await job_for_tenant(request)
    expected_version(request, job)
    if job.state is JobState.DELETED:
        raise Conflict("the job is deleted")
    now = api.clock()
    state = _patched_state(document.pop("state", None), job)
    definition, schedule = job.definition, None
    if document:
        merged = {**definition_document(job.definition), **document}
        if "payloadBase64" in document:
            merged.pop("payload", None)
        elif "payload" in document:
            merged.pop("payloadBase64", None)
        definition, schedule = parse_definition(api, request, merged, now)
    change, run = plan_change(job, state, definition, schedule, now, run_retention_s(request))
    return await apply_change(request, job, change, run, now)


def _patched_state(value: Any, job: Job) -> JobState:
    if value is None:
        return job.state
    if value not in PATCH_STATES:
        raise InvalidInput("state must be PAUSED or ACTIVE", field="state")
    return PATCH_STATES[value]


def plan_change(
    job: Job, state: JobState, definition: JobDefinition, schedule: Schedule | None, now: datetime, retention_s: int
) -> tuple[JobChange, NewRun | None]:
    """The job's new values and the run it should have next (kept `retention_s`, the tenant's run retention)."""
    if state is not JobState.ACTIVE:
        return JobChange(state, definition, None, None), None
    edited_schedule = schedule is not None and definition.schedule != job.definition.schedule
    keeps_next = job.state is JobState.ACTIVE and not edited_schedule and job.next_run_at is not None
    if keeps_next:
        at: datetime | None = job.next_run_at
    elif job.state is JobState.PAUSED:
        at = resume_at(definition, schedule_of(definition), job.updated_at, now, job.fired_count)
    else:
        at = next_at(schedule or schedule_of(definition), now, job.fired_count)
    if at is None:
        return JobChange(state, definition, None, None), None
    run = job_store.occurrence_run(
        job.job_id, job.tenant_id, job.shard, job.version + 1, definition, at, retention_s=retention_s
    )
    return JobChange(state, definition, run.scheduled_at, run.run_id), run


async def apply_change(
    request: web.Request, job: Job, change: JobChange, run: NewRun | None, now: datetime
) -> web.Response:
    api = api_of(request)
    applied, found = await api.store.reschedule(job, change, run, now, retention_s=run_retention_s(request))
    if not applied:
        raise PreconditionFailed(f"the job changed meanwhile (now at version {found})", field="If-Match")
    if run is not None:
        api.near.announce_if_near(due_run_for(run), now)
    updated = dataclasses.replace(
        job,
        state=change.state,
        version=job.version + 1,
        definition=change.definition,
        lane=change.definition.priority,
        next_run_at=change.next_run_at,
        next_run_id=change.next_run_id,
        updated_at=now,
    )
    await audit.record(request, audit.action_of(job, updated), job, updated)
    return json_response(job_document(updated), etag=updated.version)


@routes.delete("/v1/jobs/{job_id}")
async def delete_job(request: web.Request) -> web.Response:
    return await idempotent(request, b"", lambda: _delete(request))


async def _delete(request: web.Request) -> web.Response:
    api = api_of(request)
    job = await job_for_tenant(request)
    if job.state is JobState.DELETED:
        return web.Response(status=204)
    if "If-Match" in request.headers:
        expected_version(request, job)
    now = api.clock()
    change = JobChange(JobState.DELETED, job.definition, None, None)
    applied, found = await api.store.reschedule(job, change, None, now, retention_s=run_retention_s(request))
    if not applied:
        raise PreconditionFailed(f"the job changed meanwhile (now at version {found}); retry", field="If-Match")
    await quotas.give_back_job_slot(api, tenant_of(request))
    deleted = dataclasses.replace(job, state=JobState.DELETED, version=job.version + 1, updated_at=now)
    await audit.record(request, "delete", job, deleted)
    return web.Response(status=204)


@routes.get("/v1/jobs/{job_id}/preview")
async def preview_job(request: web.Request) -> web.Response:
    """The next fires (at most quotas.MAX_PREVIEW), charged against the tenant's rate by their number, so the
    rate limit bounds the event-loop time one tenant can take."""
    api = api_of(request)
    count = page_limit(request, quotas.MAX_PREVIEW, name="count", default=10)
    await quotas.charge_preview(api, tenant_of(request), count)
    job = await job_for_tenant(request)
    if job.state is JobState.DELETED:  # a deleted job fires no more: nothing to preview
        raise NotFound(f"job {job.job_id} is deleted")
    doc = job.definition.schedule
    return json_response(preview_document(schedule_of(job.definition), api.clock(), count, doc.tz))
