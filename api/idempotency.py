"""`Idempotency-Key` on mutations: the first answer is stored and replayed for the same key and request.

The key is bound to a hash of method, path and body; the same key with another request is a 422. While the
first request is still running, a second one with its key is told to retry (409 with Retry-After). A request
that fails releases its key, so the client may retry it with the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from tickwheel.errors import Conflict, InvalidInput
from tickwheel.store import idempotency

from .context import api_of, tenant_of

HEADER = "Idempotency-Key"
MAX_KEY = 255
REPLAYED = "Idempotent-Replayed"
KEPT_HEADERS = ("ETag", "Location")


async def idempotent(request: web.Request, body: bytes, handle: Callable[[], Awaitable[web.Response]]) -> web.Response:
    key = request.headers.get(HEADER)
    if key is None:
        return await handle()
    if not 0 < len(key) <= MAX_KEY or not key.isprintable():
        raise InvalidInput(f"{HEADER} must be 1 to {MAX_KEY} printable characters", field=HEADER)
    api, tenant = api_of(request), tenant_of(request)
    ttl_s = api.settings.api.idempotency_ttl_s
    digest = hashlib.sha256(f"{request.method} {request.path}\n".encode() + body).hexdigest()
    reservation = await idempotency.reserve(api.store, tenant.tenant_id, key, digest, api.clock(), ttl_s)
    if not reservation.reserved:
        return _replay(reservation, digest)
    try:
        response = await handle()
    except BaseException:
        await idempotency.release(api.store, tenant.tenant_id, key)
        raise
    stored = {"body": response.text, "headers": {h: response.headers[h] for h in KEPT_HEADERS if h in response.headers}}
    await idempotency.complete(api.store, tenant.tenant_id, key, digest, response.status, json.dumps(stored), ttl_s)
    return response


def _replay(reservation: idempotency.Reservation, digest: str) -> web.Response:
    if reservation.request_hash != digest:
        raise InvalidInput(f"this {HEADER} was used with a different request", field=HEADER)
    if reservation.status is None or reservation.response is None:
        raise Conflict(f"a request with this {HEADER} is still in progress", field=HEADER, retry_after_s=1)
    stored = json.loads(reservation.response)
    headers = {**stored["headers"], REPLAYED: "true"}
    return web.Response(
        status=reservation.status, text=stored["body"], content_type="application/json", headers=headers
    )
