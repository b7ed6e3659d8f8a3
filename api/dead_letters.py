"""/v1/dead-letters: list (filters: job, target host, time range), redrive or purge one, or a filtered set."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from tickwheel import metrics
from tickwheel.core.instants import parse_instant
from tickwheel.egress import canonical_host
from tickwheel.errors import Conflict, InvalidInput, NotFound
from tickwheel.store.buckets import due_run_for
from tickwheel.store.jobs import JobState
from tickwheel.store.records import DeadLetter

from . import audit
from .context import api_of, run_retention_s, tenant_of
from .idempotency import idempotent
from .responses import json_response, list_document, page_limit, parse_uuid, path_uuid, query_instant
from .wire import instant, parse_json

routes = web.RouteTableDef()
BULK_MAX = 1000
BULK_FILTERS = {"jobId", "targetHost", "since", "until", "dryRun", "limit"}


def letter_document(letter: DeadLetter) -> dict[str, Any]:
    """The API's DeadLetter document."""
    return {
        "run_id": str(letter.run_id),
        "job_id": str(letter.job_id),
        "dead_at": instant(letter.dead_at),
        "target_host": letter.target_host,
        "last_error": letter.last_error,
        "attempts": list(letter.attempts),
        "redriven_at": instant(letter.redriven_at),
    }


@routes.get("/v1/dead-letters")
async def list_letters(request: web.Request) -> web.Response:
    api, tenant = api_of(request), tenant_of(request)
    query = request.query
    job_id = parse_uuid(query["job_id"], "job_id") if "job_id" in query else None
    filters = {
        "job_id": job_id,
        "target_host": _host(query.get("target_host")),
        "since": query_instant(request, "since"),
        "until": query_instant(request, "until"),
    }
    scope = "dead|" + "|".join(str(v) for v in filters.values())
    rows, next_cursor = await api.store.list_dead_letters(
        tenant.tenant_id,
        limit=page_limit(request, api.settings.api.page_size_max),
        cursor=api.cursors.unseal(tenant.tenant_id, scope, query.get("cursor")),
        **filters,  # type: ignore[arg-type]
    )
    items = [letter_document(r) for r in rows]
    return json_response(list_document(items, api.cursors.seal(tenant.tenant_id, scope, next_cursor)))


async def _redrive(request: web.Request, letter: DeadLetter, now: datetime) -> bool:
    """Redrive for the job's current version; a paused or deleted job is refused (its runs would be cancelled)."""
    api = api_of(request)
    job = await api.store.get_job(letter.job_id)
    if job is None or job.state is not JobState.ACTIVE:
        state = "deleted" if job is None or job.state is JobState.DELETED else "paused"
        raise Conflict(f"job {letter.job_id} is {state}; resume it before redriving its runs")
    run = await api.store.redrive_dead_letter(
        letter, now, now, job_version=job.version, retention_s=run_retention_s(request)
    )
    if run is None:
        return False
    api.near.announce_if_near(due_run_for(run.identity(), attempt=run.attempt, fire_at=now), now)
    await audit.record(request, "redrive", job, job, {"run_id": str(letter.run_id)})
    return True


async def _redrive_or_skip(request: web.Request, letter: DeadLetter, now: datetime) -> bool:
    """In a bulk redrive, a letter whose job is paused or deleted is skipped (it is not in `run_ids`)."""
    try:
        return await _redrive(request, letter, now)
    except Conflict:
        return False


@routes.post("/v1/dead-letters/{run_id}/redrive")
async def redrive_one(request: web.Request) -> web.Response:
    return await idempotent(request, b"", lambda: _redrive_one(request))


async def letter_for_tenant(request: web.Request, absent: str = "") -> DeadLetter:
    """The caller's live dead letter of the run in the path (404 otherwise, with `absent` as a hint)."""
    run_id = path_uuid(request, "run_id", "dead letter")
    letter = await api_of(request).store.get_dead_letter(tenant_of(request).tenant_id, run_id)
    if letter is None:
        raise NotFound(f"no dead letter for run {run_id}{absent}")
    return letter


async def _redrive_one(request: web.Request) -> web.Response:
    api = api_of(request)
    letter = await letter_for_tenant(request, " (or it was already redriven)")
    run_id = letter.run_id
    now = api.clock()
    if not await _redrive(request, letter, now):
        raise NotFound(f"run {run_id} is no longer dead")
    return json_response({"run_id": str(run_id), "status": "RETRY", "due_at": instant(now)}, status=202)


@routes.post("/v1/dead-letters/redrive")
async def redrive_many(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _redrive_many(request, body))


def _bulk_filters(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise InvalidInput("the body must be a JSON object")
    unknown = sorted(set(document) - BULK_FILTERS)
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]}", field=unknown[0])
    if not isinstance(document.get("dryRun", False), bool):
        raise InvalidInput("dryRun must be true or false", field="dryRun")
    limit = document.get("limit", BULK_MAX)
    if type(limit) is not int or not 1 <= limit <= BULK_MAX:
        raise InvalidInput(f"limit must be an integer from 1 to {BULK_MAX}", field="limit")
    for name in ("jobId", "targetHost", "since", "until"):
        if name in document and not isinstance(document[name], str):
            raise InvalidInput(f"{name} must be a string", field=name)
    return document


async def _matching(request: web.Request, document: dict[str, Any]) -> list[DeadLetter]:
    """The tenant's letters a bulk body's filters select (at most its `limit`), newest first."""
    api, tenant = api_of(request), tenant_of(request)
    rows, _ = await api.store.list_dead_letters(
        tenant.tenant_id,
        limit=document.get("limit", BULK_MAX),
        job_id=parse_uuid(document["jobId"], "jobId") if "jobId" in document else None,
        target_host=_host(document.get("targetHost")),
        since=parse_instant(document["since"], field="since") if "since" in document else None,
        until=parse_instant(document["until"], field="until") if "until" in document else None,
    )
    return rows


async def _redrive_many(request: web.Request, body: bytes) -> web.Response:
    api = api_of(request)
    document = _bulk_filters(parse_json(body))
    pending = [letter for letter in await _matching(request, document) if letter.redriven_at is None]
    now = api.clock()
    if document.get("dryRun", False):
        return json_response({"dry_run": True, "matched": len(pending), "run_ids": [str(r.run_id) for r in pending]})
    redriven = [str(r.run_id) for r in pending if await _redrive_or_skip(request, r, now)]
    return json_response({"dry_run": False, "matched": len(pending), "redriven": len(redriven), "run_ids": redriven})


def _host(text: str | None) -> str | None:
    """A target host filter in the spelling dead letters are stored with (`EXAMPLE.com.` finds `example.com`)."""
    return None if text is None else canonical_host(text)


@routes.delete("/v1/dead-letters/{run_id:[0-9a-fA-F-]{32,36}}")  # not `purge` or `redrive`
async def purge_one(request: web.Request) -> web.Response:
    return await idempotent(request, b"", lambda: _purge_one(request))


async def _purge_one(request: web.Request) -> web.Response:
    letter = await letter_for_tenant(request)
    await api_of(request).store.purge_dead_letter(letter)
    metrics.dead_letters_purged.labels("one").inc()
    return web.Response(status=204)


@routes.post("/v1/dead-letters/purge")
async def purge_many(request: web.Request) -> web.Response:
    body = await request.read()
    return await idempotent(request, body, lambda: _purge_many(request, body))


async def _purge_many(request: web.Request, body: bytes) -> web.Response:
    """Delete every letter the filters select (redriven or not); with dryRun, only say which."""
    api = api_of(request)
    document = _bulk_filters(parse_json(body))
    rows = await _matching(request, document)
    run_ids = [str(r.run_id) for r in rows]
    if document.get("dryRun", False):
        return json_response({"dry_run": True, "matched": len(rows), "run_ids": run_ids})
    for row in rows:
        await api.store.purge_dead_letter(row)
    metrics.dead_letters_purged.labels("bulk").inc(len(rows))
    return json_response({"dry_run": False, "matched": len(rows), "purged": len(rows), "run_ids": run_ids})
