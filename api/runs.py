"""/v1/jobs/{id}/runs, /v1/runs/{runId}, the heartbeat of a long-running call and the completion of an
asynchronous one."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from schemas.messages import AsyncCompletionDoc, CompletionReport, encode
from tickwheel import metrics
from tickwheel.errors import Conflict, InvalidInput, NotFound
from tickwheel.store.buckets import due_run_for
from tickwheel.store.records import Found, Run, RunStatus

from .context import api_of, run_retention_s, tenant_of
from .idempotency import idempotent
from .jobs import job_for_tenant
from .responses import json_response, list_document, page_limit, path_uuid, run_document
from .wire import instant, parse_json

routes = web.RouteTableDef()
MAX_EXTEND_S = 3600
MAX_ATTEMPT = 2**31 - 1  # runs.attempt is a CQL int
MAX_DETAIL = 2048  # characters of a completion's detail kept (it is shown as the run's last error)
OUTCOMES = ("succeeded", "failed")
STATUSES = {s.value for s in RunStatus}


async def run_for_tenant(request: web.Request) -> Run:
    """The caller's run named in the path (404 when it has none by that id)."""
    run_id = path_uuid(request, "run_id", "run")
    run = await api_of(request).store.get_run(run_id)
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
    entries, next_cursor = await api.store.runs_page(
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
    attempts = await api_of(request).store.get_attempts(run.run_id)
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
    attempt = document.get("attempt")
    if type(attempt) is not int or not 1 <= attempt <= MAX_ATTEMPT:
        raise InvalidInput("attempt must be the attempt number you are running (an integer >= 1)", field="attempt")
    if "extendByS" not in document:
        return attempt, default_s  # the job's asyncCompletion.leaseS may be longer than one heartbeat's maximum
    extend_s = document["extendByS"]
    if type(extend_s) is not int or not 1 <= extend_s <= MAX_EXTEND_S:
        raise InvalidInput(f"extendByS must be an integer from 1 to {MAX_EXTEND_S}", field="extendByS")
    return attempt, extend_s


async def _heartbeat(request: web.Request, body: bytes) -> web.Response:
    api = api_of(request)
    document = parse_json(body)
    _heartbeat_body(document, 1)  # bad input answers 422 before the run is looked up
    run = await run_for_tenant(request)
    completion = await _async_completion_of(request, run)
    attempt, extend_s = _heartbeat_body(document, completion.lease_s if completion else api.settings.worker.lease_s)
    now = api.clock()
    lease_until = now + timedelta(seconds=extend_s)
    if completion is not None:
        lease_until = min(lease_until, _latest_lease(run, completion, now))
        if lease_until <= now:
            raise Conflict(f"the run's maximum lease ({completion.max_lease_s} s from its claim) has passed",
                           field="attempt")  # fmt: skip
    transition = await api.store.extend_lease(run.run_id, attempt, lease_until, now, run_retention_s(request))
    if not transition.applied or transition.lease_until is None:
        raise _not_holding(attempt, transition.found)
    return json_response({"id": str(run.run_id), "attempt": attempt, "lease_until": instant(transition.lease_until)})


async def _async_completion_of(request: web.Request, run: Run) -> AsyncCompletionDoc | None:
    """The run's job's asynchronous-completion settings (None: the job did not opt in, or is gone)."""
    job = await api_of(request).store.get_job(run.job_id)
    return None if job is None else job.definition.async_completion


def _latest_lease(run: Run, completion: AsyncCompletionDoc, now: datetime) -> datetime:
    started_at = run.started_at or now
    return started_at + timedelta(seconds=completion.max_lease_s)


def _not_holding(attempt: int, found: Found) -> Conflict:
    status = None if found.status is None else found.status.value
    return Conflict(f"attempt {attempt} does not hold the run (it is {status} at attempt {found.attempt})",
                    field="attempt")  # fmt: skip


@routes.post("/v1/runs/{run_id}/complete")
async def complete(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _complete(request, body))


def _completion_body(document: Any) -> tuple[int, CompletionReport]:
    fields = {"attempt", "outcome", "detail"}
    if not isinstance(document, dict) or set(document) - fields:
        unknown = sorted(set(document) - fields) if isinstance(document, dict) else []
        raise InvalidInput(f"unknown field {unknown[0]}" if unknown else "the body must be a JSON object",
                           field=unknown[0] if unknown else None)  # fmt: skip
    attempt, outcome, detail = document.get("attempt"), document.get("outcome"), document.get("detail")
    if type(attempt) is not int or not 1 <= attempt <= MAX_ATTEMPT:
        raise InvalidInput("attempt must be the attempt number you were called with (an integer >= 1)", field="attempt")
    if outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}", field="outcome")
    if detail is not None and (not isinstance(detail, str) or len(detail) > MAX_DETAIL):
        raise InvalidInput(f"detail must be a string of at most {MAX_DETAIL} characters", field="detail")
    return attempt, CompletionReport(outcome=outcome, detail=detail)


async def _complete(request: web.Request, body: bytes) -> web.Response:
    """Fence the reported outcome into the run (the attempt is the fencing token); a worker records it at once
    through the ordinary outcome path (retry policy, dead letter, notifications). 202: reported, not yet
    recorded; the run's status tells when it is."""
    api = api_of(request)
    attempt, report = _completion_body(parse_json(body))
    run = await run_for_tenant(request)
    if await _async_completion_of(request, run) is None:
        raise Conflict("the run's job does not use asynchronous completion (asyncCompletion)", field="attempt")
    now = api.clock()
    report = CompletionReport(report.outcome, report.detail, int(now.timestamp() * 1000))
    held = run.identity(run_retention_s(request))
    transition = await api.store.report_completion(held, attempt, encode(report).decode(), now)
    if not transition.applied:
        metrics.async_completions.labels("refused").inc()
        found = transition.found
        if found.attempt == attempt and attempt in found.reported:
            raise Conflict(f"attempt {attempt} has already reported its outcome", field="attempt")
        raise _not_holding(attempt, found)
    metrics.async_completions.labels("reported").inc()
    due = due_run_for(run.identity(), attempt=attempt, kind="lease_check", fire_at=now)
    api.near.announce_if_near(due, now)
    document = {"id": str(run.run_id), "attempt": attempt, "outcome": report.outcome, "status": "RUNNING"}
    return json_response(document, status=202)
