"""Tenants, their hashed API keys and their signing secrets.

An API key is shown once, when it is made; only its sha256 is stored, so a leaked table leaks no key. Signing
secrets (HMAC keys the worker signs calls with) are kept newest first; a rotation keeps the previous one so a
target can accept both while it switches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from tickwheel.errors import Conflict, NotFound
from tickwheel.signing import generate_secret
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import Tenant as Tenant
from tickwheel.store.records import tenant_of
from tickwheel.store.times import aware

KEY_PREFIX = "tw_"
SECRETS_KEPT = 2


@dataclass(frozen=True, slots=True)
class TenantChange:
    """Operator overrides of a tenant's defaults; a field left None is not changed, `clear` names the overrides
    to remove (back to the settings' default)."""

    retention_days: int | None = None
    weight: int | None = None
    max_jobs: int | None = None
    notify_url: str | None = None
    notify_events: frozenset[str] | None = None
    clear: frozenset[str] = frozenset()


TENANT_OVERRIDES = ("retention_days", "weight", "max_jobs", "notify_url", "notify_events")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key as listed: its public id, never the key (only its hash is stored)."""

    key_id: str
    tenant_id: str
    created_at: datetime | None
    revoked_at: datetime | None


def hash_key(key: str) -> str:
    """The sha256 of an API key: what `api_keys` is keyed by."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key_hash: str) -> str:
    """A key's public id: the head of its hash (shown in listings and the audit log; it reveals nothing)."""
    return key_hash[:12]


async def create_tenant(
    store: CassandraStore, name: str, now: datetime, *, tenant_id: str | None = None
) -> tuple[Tenant, str]:
    """Create tenant `name` (unique) with a signing secret and a first API key; returns (tenant, api key)."""
    tenant_id = tenant_id or uuid.uuid4().hex
    applied, _ = await store.applied(
        "INSERT INTO tenants_by_name (name, tenant_id) VALUES (?, ?) IF NOT EXISTS", [name, tenant_id]
    )
    if not applied:
        raise Conflict(f"a tenant named {name!r} already exists", field="name")
    secret = generate_secret()
    await store.execute(
        "INSERT INTO tenants (tenant_id, name, created_at, signing_secrets) VALUES (?, ?, ?, ?)",
        [tenant_id, name, now, [secret]],
    )
    _, key = await create_key(store, tenant_id, now)
    return Tenant(tenant_id, name, now, (secret,)), key


async def get_tenant(store: CassandraStore, tenant_id: str) -> Tenant | None:
    """The tenant, or None when it has no row."""
    rows = await store.execute("SELECT * FROM tenants WHERE tenant_id = ?", [tenant_id])
    return tenant_of(rows[0]) if rows else None


async def tenant_by_name(store: CassandraStore, name: str) -> Tenant:
    """The tenant named `name`; NotFound when there is none."""
    rows = await store.execute("SELECT tenant_id FROM tenants_by_name WHERE name = ?", [name])
    tenant = await get_tenant(store, rows[0]["tenant_id"]) if rows else None
    if tenant is None:
        raise NotFound(f"no tenant named {name!r}", field="name")
    return tenant


async def list_tenants(store: CassandraStore) -> list[Tenant]:
    """Every tenant (an operator command: a full scan of a small table)."""
    rows = await store.execute("SELECT * FROM tenants")
    return sorted((tenant_of(row) for row in rows), key=lambda t: t.name)


async def change_tenant(store: CassandraStore, tenant_id: str, change: TenantChange) -> Tenant:
    """Apply an operator's overrides (one write of the columns named) and return the tenant as it now is."""
    assignments: list[str] = []
    params: list[object] = []
    for name in TENANT_OVERRIDES:
        value = getattr(change, name)
        if name in change.clear:
            assignments.append(f"{name} = null")
        elif value is not None:
            assignments.append(f"{name} = ?")
            params.append(set(value) if isinstance(value, frozenset) else value)
    if await get_tenant(store, tenant_id) is None:
        raise NotFound(f"no tenant {tenant_id!r}")
    if assignments:
        await store.execute(f"UPDATE tenants SET {', '.join(assignments)} WHERE tenant_id = ?", [*params, tenant_id])
    tenant = await get_tenant(store, tenant_id)
    assert tenant is not None
    return tenant


async def create_key(store: CassandraStore, tenant_id: str, now: datetime) -> tuple[ApiKey, str]:
    """A new API key for the tenant; the key itself is returned here and never again."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_hash = hash_key(key)
    key_id = key_id_of(key_hash)
    await store.batch(
        [
            (
                "INSERT INTO api_keys (key_hash, key_id, tenant_id, created_at) VALUES (?, ?, ?, ?)",
                [key_hash, key_id, tenant_id, now],
            ),
            (
                "INSERT INTO api_keys_by_tenant (tenant_id, key_id, key_hash, created_at) VALUES (?, ?, ?, ?)",
                [tenant_id, key_id, key_hash, now],
            ),
        ]
    )
    return ApiKey(key_id, tenant_id, now, None), key


async def list_keys(store: CassandraStore, tenant_id: str) -> list[ApiKey]:
    """The tenant's keys, revoked ones included, oldest first."""
    rows = await store.execute("SELECT * FROM api_keys_by_tenant WHERE tenant_id = ?", [tenant_id])
    keys = [ApiKey(r["key_id"], tenant_id, aware(r["created_at"]), aware(r["revoked_at"])) for r in rows]
    return sorted(keys, key=lambda k: k.created_at.timestamp() if k.created_at else 0.0)


async def revoke_key(store: CassandraStore, tenant_id: str, key_id: str, now: datetime) -> None:
    """Revoke one of the tenant's keys (NotFound when it has no such key); the key stops authenticating."""
    rows = await store.execute(
        "SELECT key_hash FROM api_keys_by_tenant WHERE tenant_id = ? AND key_id = ?", [tenant_id, key_id]
    )
    if not rows:
        raise NotFound(f"tenant has no key {key_id!r}", field="key_id")
    await store.batch(
        [
            ("UPDATE api_keys SET revoked_at = ? WHERE key_hash = ?", [now, rows[0]["key_hash"]]),
            (
                "UPDATE api_keys_by_tenant SET revoked_at = ? WHERE tenant_id = ? AND key_id = ?",
                [now, tenant_id, key_id],
            ),
        ]
    )


async def rotate_key(store: CassandraStore, tenant_id: str, now: datetime) -> tuple[ApiKey, str]:
    """A new key; every older live key is revoked (clients switch to the printed key)."""
    old = [k for k in await list_keys(store, tenant_id) if k.revoked_at is None]
    made = await create_key(store, tenant_id, now)
    for key in old:
        await revoke_key(store, tenant_id, key.key_id, now)
    return made


async def authenticate(store: CassandraStore, key: str) -> str | None:
    """The tenant id owning a live `key`, or None."""
    rows = await store.execute("SELECT tenant_id, revoked_at FROM api_keys WHERE key_hash = ?", [hash_key(key)])
    if not rows or rows[0]["revoked_at"] is not None:
        return None
    return str(rows[0]["tenant_id"])


async def rotate_signing_secret(store: CassandraStore, tenant_id: str) -> Tenant:
    """Put a new signing secret first and keep the previous one (targets accept both during the switch)."""
    tenant = await get_tenant(store, tenant_id)
    if tenant is None:
        raise NotFound(f"no tenant {tenant_id!r}")
    kept = [generate_secret(), *tenant.signing_secrets][:SECRETS_KEPT]
    await store.execute("UPDATE tenants SET signing_secrets = ? WHERE tenant_id = ?", [kept, tenant_id])
    return dataclasses.replace(tenant, signing_secrets=tuple(kept))


async def call_settings(store: CassandraStore, tenant_id: str) -> Tenant:
    """What a worker needs of a tenant to make its calls (secrets, Kafka prefix, caps, notifications, fair-share
    weight); a tenant with no row has none of them (no secret, the default prefix, weight 1)."""
    rows = await store.execute(
        "SELECT tenant_id, signing_secrets, kafka_topic_prefix, concurrency, retention_days, notify_url,"
        " notify_events, weight FROM tenants WHERE tenant_id = ?",
        [tenant_id],
    )
    return tenant_of(rows[0]) if rows else Tenant(tenant_id, "", None, ())
