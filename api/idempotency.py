"""`Idempotency-Key` on mutations: the first answer is stored and replayed for the same key and request.

The key is bound to a hash of method, path and body; the same key with another request is a 422. While the
first request is still running, a second one with its key is told to retry (409 with Retry-After). A request
that fails releases its key, so the client may retry it with the same key.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from tickwheel.errors import Conflict, InvalidInput
from tickwheel.store import idempotency

from .context import api_of, tenant_of

HEADER = "Idempotency-Key"
MAX_KEY = 255
REPLAYED = "Idempotent-Replayed"
KEPT_HEADERS = ("ETag", "Location")
KEYED_JOBS = uuid.UUID("6f1d3c52-8a4e-4c1b-9d57-2f0e7b9a4c11")  # namespace of job ids derived from keys


@dataclass(frozen=True, slots=True)
class KeyedCreate:
    """A create sent with an Idempotency-Key: the job id it derives and the hash of the request."""

    job_id: uuid.UUID
    request_hash: str


def keyed_create(request: web.Request, body: bytes) -> KeyedCreate | None:
    """The job id a keyed create makes (uuid5 of tenant and key: the same key names the same job), or None."""
    key = _key(request)
    if key is None:
        return None
    job_id = uuid.uuid5(KEYED_JOBS, f"{tenant_of(request).tenant_id}\n{key}")
    return KeyedCreate(job_id, _digest(request, body))


@dataclass(frozen=True, slots=True)
class KeyedBatch:
    """A batch create sent with an Idempotency-Key: the key and the hash of the whole batch (computed once)."""

    prefix: str  # the tenant and the key, what every item's job id is derived from
    request_hash: str

    def item(self, index: int) -> KeyedCreate:
        """What `keyed_create` is for item `index`: the batch's key and the item's place name the job, and the hash
        is the whole batch's, so the key stays bound to that exact batch (another batch under the same key is
        refused item by item, as a single create's would be)."""
        return KeyedCreate(uuid.uuid5(KEYED_JOBS, f"{self.prefix}\nbatch item {index}"), self.request_hash)


def keyed_batch(request: web.Request, body: bytes) -> KeyedBatch | None:
    """The batch's Idempotency-Key and hash (`KeyedBatch.item` names each item's job), or None without a key."""
    key = _key(request)
    if key is None:
        return None
    return KeyedBatch(f"{tenant_of(request).tenant_id}\n{key}", _digest(request, body))


def check_replay(keyed: KeyedCreate, stored_hash: str | None) -> None:
    """422 when the key was used with another request."""
    if stored_hash != keyed.request_hash:
        raise InvalidInput(f"this {HEADER} was used with a different request", field=HEADER)


def _key(request: web.Request) -> str | None:
    key = request.headers.get(HEADER)
    if key is not None and (not 0 < len(key) <= MAX_KEY or not key.isprintable()):
        raise InvalidInput(f"{HEADER} must be 1 to {MAX_KEY} printable characters", field=HEADER)
    return key


def _digest(request: web.Request, body: bytes) -> str:
    return hashlib.sha256(f"{request.method} {request.path}\n".encode() + body).hexdigest()


async def idempotent(request: web.Request, body: bytes, handle: Callable[[], Awaitable[web.Response]]) -> web.Response:
    key = _key(request)
    if key is None:
        return await handle()
    api, tenant = api_of(request), tenant_of(request)
    ttl_s = api.settings.api.idempotency_ttl_s
    digest = _digest(request, body)
    reservation = await api.store.reserve_key(tenant.tenant_id, key, digest, api.clock(), ttl_s)
    if not reservation.reserved:
        return _replay(reservation, digest)
    try:
        response = await handle()
    except BaseException:
        await api.store.release_key(tenant.tenant_id, key)
        raise
    stored = {"body": response.text, "headers": {h: response.headers[h] for h in KEPT_HEADERS if h in response.headers}}
    await api.store.complete_key(tenant.tenant_id, key, digest, response.status, json.dumps(stored), ttl_s)
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
