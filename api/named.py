"""Jobs by name: PUT /v1/jobs/by-name/{name} creates or replaces the tenant's job of that name; GET, PATCH and
DELETE by name are the same handlers as by id (api.jobs.job_for_tenant resolves the name).

Names are unique per tenant through `jobs_by_name` (tickwheel.store.names): a create claims the name with an LWT
before writing the job; a replace is the job's own versioned LWT. A PUT whose body equals the stored definition
changes nothing (200, same version), so a declarative tool may apply the same file every time. `If-Match` makes a
replace conditional on the version; `If-None-Match: *` makes the PUT create-only. Names given in POST /v1/jobs'
`name` field are labels and claim nothing.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from schemas.messages import JobDefinition
from tickwheel.core.schedule import Schedule
from tickwheel.errors import Conflict, InvalidInput, PreconditionFailed
from tickwheel.store.jobs import Job, JobState
from tickwheel.store.names import NameClaim

from . import jobs
from .context import api_of, run_retention_s, tenant_of
from .idempotency import idempotent
from .responses import job_document, json_response
from .wire import parse_json

routes = web.RouteTableDef()
PATH = "/v1/jobs/by-name/{name}"
CREATE_WINDOW = timedelta(seconds=60)  # longer than any create takes (its writes time out well before)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]{0,199}$")  # URL path-safe without escaping


@routes.put(PATH)
async def put_job(request: web.Request) -> web.Response:
    # The path and headers before the Idempotency-Key: a replay must not accept what a first request refuses.
    if not NAME.match(request.match_info["name"]):
        raise InvalidInput("a job name is 1 to 200 of A-Z a-z 0-9 . _ ~ - (starting with a letter or digit)",
                           field="name")  # fmt: skip
    if request.headers.get("If-None-Match", "*").strip() != "*":
        raise InvalidInput("If-None-Match may only be * (create only)", field="If-None-Match")
    body = await request.read()
    return await idempotent(request, body, lambda: _put(request, body))


async def _put(request: web.Request, body: bytes) -> web.Response:
    api, tenant = api_of(request), tenant_of(request)
    name = request.match_info["name"]
    document = parse_json(body)
    claimed = await api.store.name_claim(tenant.tenant_id, name)
    current = None if claimed is None else await api.store.get_job(claimed.job_id)
    now = api.clock()
    if current is not None and current.state is not JobState.DELETED:
        definition, schedule = jobs.parse_definition(api, request, _named_document(document, name, current), now)
        return await _replace(request, current, definition, schedule, now)
    definition, schedule = jobs.parse_definition(api, request, _named_document(document, name, None), now)
    if "If-Match" in request.headers:
        raise PreconditionFailed(f"there is no job named {name!r} to match", field="If-Match")
    job_id = uuid.uuid4()
    if claimed is None:
        taken = await api.store.claim_name(tenant.tenant_id, name, job_id, now)
    elif current is None and _may_be_in_progress(claimed, now):
        taken = False  # its job is not written yet: maybe another PUT is creating it right now
    else:
        taken = await api.store.move_name(tenant.tenant_id, name, claimed.job_id, job_id, now)
    if not taken:
        raise Conflict(f"another request is creating the job named {name!r}; retry", field="name", retry_after_s=1)
    try:
        job, _ = await jobs.create(request, definition, schedule, job_id, now)
    except BaseException:
        await api.store.release_name(tenant.tenant_id, name, job_id)
        raise
    return json_response(job_document(job), status=201, etag=job.version, location=f"/v1/jobs/{job_id}")


def _may_be_in_progress(claimed: NameClaim, now: datetime) -> bool:
    """A claim whose job is missing is a create in progress for CREATE_WINDOW, then a create that died."""
    return claimed.claimed_at is None or now - claimed.claimed_at < CREATE_WINDOW


def _named_document(document: Any, name: str, current: Job | None) -> Any:
    """The body with the path's name; an interval job replaced without `anchorAt` keeps its anchor (its fires)."""
    if not isinstance(document, dict):
        return document
    if document.get("name") not in (None, name):
        raise InvalidInput("name in the body must be the name in the path (or absent)", field="name")
    document = {**document, "name": name}
    schedule = document.get("schedule")
    anchor = current.definition.schedule.anchor_at if current is not None else None
    if anchor is not None and isinstance(schedule, dict) and schedule.get("type") == "interval":
        document["schedule"] = {"anchorAt": anchor, **schedule}  # an anchorAt in the body wins
    return document


async def _replace(
    request: web.Request, job: Job, definition: JobDefinition, schedule: Schedule, now: datetime
) -> web.Response:
    if request.headers.get("If-None-Match", "").strip() == "*":
        raise PreconditionFailed(f"a job named {definition.name!r} exists (If-None-Match: *)", field="If-None-Match")
    if "If-Match" in request.headers:
        jobs.expected_version(request, job)
    if definition == job.definition:
        return json_response(job_document(job), etag=job.version)
    change, run = jobs.plan_change(job, job.state, definition, schedule, now, run_retention_s(request))
    return await jobs.apply_change(request, job, change, run, now)


@routes.patch(PATH)
async def patch_by_name(request: web.Request) -> web.StreamResponse:
    """PATCH by id, except that the job's name is its path here: a body may not rename it."""
    document = parse_json(await request.read())
    if isinstance(document, dict) and document.get("name", request.match_info["name"]) != request.match_info["name"]:
        raise InvalidInput("a job addressed by name keeps its name; PUT another name to make another job", field="name")
    return await jobs.patch_job(request)


# GET and DELETE by name: the handlers by id, whose job_for_tenant reads the name from the path.
routes.get(PATH)(jobs.get_job)
routes.delete(PATH)(jobs.delete_job)
