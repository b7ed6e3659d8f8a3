"""POST /v1/jobs/batch: up to `MAX_ITEMS` job bodies in one request, each created through the single-create path.

Every item is created as `POST /v1/jobs` would create it (validation, durable writes, the near-term
announcement, the audit row), several at once, their writes grouped with each other's (store.grouping); what is
per batch is done once: every item is checked before any write, the job quota is taken for all the valid items
in one call (those past it are refused) and the slots not used are given back in one, and the body is hashed
once under an Idempotency-Key. The answer lists each item's outcome in order: 201
with the job once it is durable, or its problem object (RFC 9457) with the field prefixed by the item
(`jobs[3].schedule`). One item's failure does not undo the others. Under an `Idempotency-Key`, item `i` is the
job the key and `i` name, so sending the same batch again (after a timeout, or a 503 on some items) creates only
what is missing and answers the same jobs for the rest (`replayed`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime
from typing import Any

from aiohttp import web

from schemas.messages import JobDefinition
from tickwheel.core.instants import whole_ms
from tickwheel.core.schedule import Schedule
from tickwheel.errors import InvalidInput, TickwheelError

from . import quotas
from .context import api_of, tenant_of
from .idempotency import KeyedCreate, keyed_batch
from .jobs import create, earlier_create, parse_definition
from .problems import error_document
from .responses import job_document, json_response
from .wire import parse_json

log = logging.getLogger(__name__)
routes = web.RouteTableDef()

MAX_ITEMS = 500
ITEMS_AT_ONCE = 64  # creates in flight per batch: their writes go out grouped (store.grouping), a few batches a round
PARSED_PER_TURN = 50  # items checked between two turns of the event loop
MAX_BODY_BYTES = 8 * 1024 * 1024  # larger than a single create's limit: 500 bodies of ~16 KB


@routes.post("/v1/jobs/batch")
async def create_jobs(request: web.Request) -> web.Response:
    body = await request.clone(client_max_size=MAX_BODY_BYTES).read()
    items = _items(parse_json(body))
    api, tenant = api_of(request), tenant_of(request)
    keyed = keyed_batch(request, body)  # the batch's hash, once (not once per item: the body may be 8 MiB)
    now = whole_ms(api.clock())
    results: list[dict[str, Any] | None] = [None] * len(items)
    valid = []
    for index, document in enumerate(items):
        try:
            valid.append((index, *parse_definition(api, request, document, now)))
        except TickwheelError as exc:
            results[index] = _problem(index, exc)
        if index % PARSED_PER_TURN == PARSED_PER_TURN - 1:
            await asyncio.sleep(0)  # let the loop's other requests run between slices of a large batch
    # The job quota once for the batch (one round trip, not one per item); items past the quota are refused.
    taken = await quotas.take_job_slots(api, tenant, len(valid))
    gate = asyncio.Semaphore(ITEMS_AT_ONCE)

    async def one(index: int, definition: JobDefinition, schedule: Schedule) -> None:
        async with gate:
            item = keyed.item(index) if keyed else None
            results[index] = await _create_item(request, index, definition, schedule, now, item)

    async def past_quota(index: int) -> None:
        async with gate:  # an item of a batch sent again answers as its replay, not as a new job over the quota
            results[index] = await _earlier_item(request, index, now, keyed.item(index) if keyed else None)

    try:
        await asyncio.gather(*(one(*item) for item in valid[:taken]), *(past_quota(i) for i, *_ in valid[taken:]))
    finally:
        created = sum(1 for r in results if r is not None and r["status"] == 201 and not r["replayed"])
        await quotas.give_back_job_slots(api, tenant, taken - created)
    done = [r for r in results if r is not None]
    failed = sum(1 for r in done if r["status"] >= 400)
    replayed = sum(1 for r in done if r.get("replayed"))
    summary = {"created": len(done) - failed - replayed, "replayed": replayed, "failed": failed}
    return json_response({"items": done, **summary})


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


async def _create_item(
    request: web.Request,
    index: int,
    definition: JobDefinition,
    schedule: Schedule,
    now: datetime,
    keyed: KeyedCreate | None,
) -> dict[str, Any]:
    """One checked item through the single create (its job slot taken by the batch): its result entry, or its
    problem naming the item."""
    try:
        job_id = keyed.job_id if keyed else uuid.uuid4()
        job, replayed = await create(request, definition, schedule, job_id, now, keyed, slot_taken=True)
    except TickwheelError as exc:
        if exc.status >= 500:  # as the error middleware logs a single create's
            log.warning("POST /v1/jobs/batch item %d answered %s: %s", index, exc.status, exc.message)
        return _problem(index, exc)
    return {"index": index, "status": 201, "replayed": replayed, "job": job_document(job)}


async def _earlier_item(
    request: web.Request, index: int, now: datetime, keyed: KeyedCreate | None
) -> dict[str, Any]:
    """An item past the tenant's job quota: the job an earlier send of the batch made for it (a replay), else the
    quota's problem."""
    try:
        job = await earlier_create(request, keyed, now)
    except TickwheelError as exc:
        return _problem(index, exc)
    if job is None:
        return _problem(index, quotas.job_quota_exceeded(api_of(request), tenant_of(request)))
    return {"index": index, "status": 201, "replayed": True, "job": job_document(job)}


def _problem(index: int, exc: TickwheelError) -> dict[str, Any]:
    """Item `index`'s entry for its error: the problem a single create would answer, its field under the item."""
    field = f"jobs[{index}].{exc.field}" if exc.field and exc.field != "Idempotency-Key" else exc.field
    return {"index": index, "status": exc.status, "problem": error_document(exc, field=field or f"jobs[{index}]")}


@routes.route("*", "/v1/jobs/batch")
async def other_methods(request: web.Request) -> web.Response:
    """Only POST is here: another method is a 405, not a read or change of a job whose id would be "batch"."""
    raise web.HTTPMethodNotAllowed(request.method, ["POST"])
