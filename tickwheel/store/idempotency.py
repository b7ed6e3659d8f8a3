"""Idempotency keys: the first request with a key reserves it; its answer is stored and replayed for 24 h.

A key is reserved with `INSERT ... IF NOT EXISTS` (so of two concurrent first requests one wins), bound to a
hash of the request; the same key with another request is refused by the caller. A reservation whose request
failed is released so the client can retry with the same key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwheel.store.cassandra import CassandraStore


@dataclass(frozen=True, slots=True)
class Reservation:
    """`reserved`: this request owns the key. Otherwise the earlier request's hash and answer (status None:
    still in progress)."""

    reserved: bool
    request_hash: str
    status: int | None = None
    response: str | None = None


async def reserve(
    store: CassandraStore, tenant_id: str, key: str, request_hash: str, now: datetime, ttl_s: int
) -> Reservation:
    """Reserve `key` for this request (kept `ttl_s`), or say what the request that holds it asked and answered."""
    applied, current = await store.applied(
        "INSERT INTO idempotency_keys (tenant_id, key, request_hash, created_at) VALUES (?, ?, ?, ?)"
        " IF NOT EXISTS USING TTL ?",
        [tenant_id, key, request_hash, now, ttl_s],
    )
    if applied:
        return Reservation(True, request_hash)
    return Reservation(False, current.get("request_hash") or "", current.get("status"), current.get("response"))


async def complete(
    store: CassandraStore, tenant_id: str, key: str, request_hash: str, status: int, response: str, ttl_s: int
) -> None:
    """Store the answer given to the request that reserved `key`."""
    await store.execute(
        "UPDATE idempotency_keys USING TTL ? SET request_hash = ?, status = ?, response = ?"
        " WHERE tenant_id = ? AND key = ?",
        [ttl_s, request_hash, status, response, tenant_id, key],
    )


async def release(store: CassandraStore, tenant_id: str, key: str) -> None:
    """Forget a reservation whose request failed, so a retry with the same key runs again."""
    await store.execute("DELETE FROM idempotency_keys WHERE tenant_id = ? AND key = ?", [tenant_id, key])
