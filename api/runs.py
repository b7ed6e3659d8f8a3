"""/v1/jobs/{id}/runs, /v1/runs/{runId} and the heartbeat of a long-running call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp import web

from tickwheel.errors import Conflict, InvalidInput, NotFound
from tickwheel.store import run_history
from tickwheel.store import runs as run_store
from tickwheel.store.records import Run, RunStatus

from .context import api_of, tenant_of
from .idempotency import idempotent
from .jobs import job_for_tenant
from .responses import json_response, list_document, page_limit, path_uuid, run_document
from .wire import instant, parse_json

routes = web.RouteTableDef()
MAX_EXTEND_S = 3600
MAX_ATTEMPT = 2**31 - 1  # runs.attempt is a CQL int
STATUSES = {s.value for s in RunStatus}


async def run_for_tenant(request: web.Request) -> Run:
    """The caller's run named in the path (404 when it has none by that id)."""
    run_id = path_uuid(request, "run_id", "run")
    run = await run_store.get_run(api_of(request).store, run_id)
    if run is None or run.tenant_id != tenant_of(request).tenant_id:
        raise NotFound(f"no run {run_id}")
    return run


@routes.get("/v1/jobs/{job_id}/runs")
async def list_runs(request: web.Request) -> web.Response:
    api, tenant = api_of(request), tenant_of(request)
    job = await job_for_tenant(request)
    status = request.query.get("status")
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(sorted(STATUSES))}", field="status")
    scope = f"runs|{job.job_id}|{status}"
    entries, next_cursor = await run_history.page_of_job(
        api.store,
        job.job_id,
        status,
        page_size=page_limit(request, api.settings.api.page_size_max),
        cursor=api.cursors.unseal(tenant.tenant_id, scope, request.query.get("cursor")),
    )
    items = [
        {
            "id": str(entry.run_id),
            "scheduled_at": instant(entry.scheduled_at),
            "status": entry.status.value,
            "attempt": entry.attempt,
            "updated_at": instant(entry.updated_at),
            "origin": entry.origin or "schedule",
        }
        for entry in entries
    ]
    return json_response(list_document(items, api.cursors.seal(tenant.tenant_id, scope, next_cursor)))


@routes.get("/v1/runs/{run_id}")
async def get_run(request: web.Request) -> web.Response:
    run = await run_for_tenant(request)
    attempts = await run_store.get_attempts(api_of(request).store, run.run_id)
    document = run_document(run)
    document["attempts"] = [
        {
            "attempt": a.attempt,
            "kind": a.kind,
            "outcome": a.outcome,
            "worker": a.worker,
            "started_at": instant(a.started_at),
            "finished_at": instant(a.finished_at),
            "response_code": a.response_code,
            "error": a.error,
            "response_excerpt": a.response_excerpt,
        }
        for a in attempts
    ]
    return json_response(document)


@routes.post("/v1/runs/{run_id}/heartbeat")
async def heartbeat(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _heartbeat(request, body))


def _heartbeat_body(document: Any, default_s: int) -> tuple[int, int]:
    if not isinstance(document, dict) or set(document) - {"attempt", "extendByS"}:
        unknown = sorted(set(document) - {"attempt", "extendByS"}) if isinstance(document, dict) else []
        raise InvalidInput(f"unknown field {unknown[0]}" if unknown else "the body must be a JSON object",
                           field=unknown[0] if unknown else None)  # fmt: skip
    attempt, extend_s = document.get("attempt"), document.get("extendByS", default_s)
    if type(attempt) is not int or not 1 <= attempt <= MAX_ATTEMPT:
        raise InvalidInput("attempt must be the attempt number you are running (an integer >= 1)", field="attempt")
    if type(extend_s) is not int or not 1 <= extend_s <= MAX_EXTEND_S:
        raise InvalidInput(f"extendByS must be an integer from 1 to {MAX_EXTEND_S}", field="extendByS")
    return attempt, extend_s


async def _heartbeat(request: web.Request, body: bytes) -> web.Response:
    api = api_of(request)
    attempt, extend_s = _heartbeat_body(parse_json(body), api.settings.worker.lease_s)
    run = await run_for_tenant(request)
    lease_until = api.clock() + timedelta(seconds=extend_s)
    transition = await run_store.extend_lease(api.store, run.run_id, attempt, lease_until)
    if not transition.applied:
        found = transition.found
        raise Conflict(
            f"attempt {attempt} does not hold the run (it is {found.status} at attempt {found.attempt})",
            field="attempt",
        )
    return json_response({"id": str(run.run_id), "attempt": attempt, "lease_until": instant(lease_until)})
