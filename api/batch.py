"""POST /v1/jobs/batch: up to `MAX_ITEMS` job bodies in one request, each created through the single-create path.

Every item is created exactly as `POST /v1/jobs` would create it (validation, quota, durable writes, the
near-term announcement, the audit row), several at once; the answer lists each item's outcome in order: 201
with the job once it is durable, or its problem object (RFC 9457) with the field prefixed by the item
(`jobs[3].schedule`). One item's failure does not undo the others. Under an `Idempotency-Key`, item `i` is the
job the key and `i` name, so sending the same batch again (after a timeout, or a 503 on some items) creates only
what is missing and answers the same jobs for the rest (`replayed`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from aiohttp import web

from tickwheel.core.instants import whole_ms
from tickwheel.errors import InvalidInput, TickwheelError

from .context import api_of
from .idempotency import keyed_batch_item
from .jobs import create, parse_definition
from .problems import error_document
from .responses import job_document, json_response
from .wire import parse_json

log = logging.getLogger(__name__)
routes = web.RouteTableDef()

MAX_ITEMS = 500
ITEMS_AT_ONCE = 32  # creates in flight per batch: enough to hide the writes' round trips, few enough to share
MAX_BODY_BYTES = 8 * 1024 * 1024  # larger than a single create's limit: 500 bodies of ~16 KB


@routes.post("/v1/jobs/batch")
async def create_jobs(request: web.Request) -> web.Response:
    body = await request.clone(client_max_size=MAX_BODY_BYTES).read()
    items = _items(parse_json(body))
    gate = asyncio.Semaphore(ITEMS_AT_ONCE)

    async def one(index: int, document: Any) -> dict[str, Any]:
        async with gate:
            return await _create_item(request, body, index, document)

    results = await asyncio.gather(*(one(i, document) for i, document in enumerate(items)))
    failed = sum(1 for r in results if r["status"] >= 400)
    replayed = sum(1 for r in results if r.get("replayed"))
    summary = {"created": len(results) - failed - replayed, "replayed": replayed, "failed": failed}
    return json_response({"items": results, **summary})


def _items(document: Any) -> list[Any]:
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise InvalidInput("the body must be an object with a list of job bodies in `jobs`", field="jobs")
    items: list[Any] = document["jobs"]
    if not 1 <= len(items) <= MAX_ITEMS:
        raise InvalidInput(f"a batch holds 1 to {MAX_ITEMS} jobs; this one has {len(items)}", field="jobs")
    extra = sorted(set(document) - {"jobs"})
    if extra:
        raise InvalidInput(f"unknown field {extra[0]!r}; a batch has only `jobs`", field=extra[0])
    return items


async def _create_item(request: web.Request, body: bytes, index: int, document: Any) -> dict[str, Any]:
    """One item through the single-create path: its result entry, or its problem naming the item."""
    api = api_of(request)
    now = whole_ms(api.clock())
    try:
        definition, schedule = parse_definition(api, request, document, now)
        keyed = keyed_batch_item(request, body, index)
        job_id = keyed.job_id if keyed else uuid.uuid4()
        job, replayed = await create(request, definition, schedule, job_id, now, keyed)
    except TickwheelError as exc:
        if exc.status >= 500:  # as the error middleware logs a single create's
            log.warning("POST /v1/jobs/batch item %d answered %s: %s", index, exc.status, exc.message)
        field = f"jobs[{index}].{exc.field}" if exc.field and exc.field != "Idempotency-Key" else exc.field
        return {"index": index, "status": exc.status, "problem": error_document(exc, field=field or f"jobs[{index}]")}
    return {"index": index, "status": 201, "replayed": replayed, "job": job_document(job)}


@routes.route("*", "/v1/jobs/batch")
async def other_methods(request: web.Request) -> web.Response:
    """Only POST is here: another method is a 405, not a read or change of a job whose id would be "batch"."""
    raise web.HTTPMethodNotAllowed(request.method, ["POST"])
