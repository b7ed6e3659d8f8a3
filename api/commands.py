"""`tickwheel tenants ...`: create tenants, manage their API keys (printed once, stored hashed) and set their
overrides of the platform's defaults (retention, fair-share weight, job quota, notification route)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from tickwheel.core.notify import RunEvent
from tickwheel.errors import InvalidInput
from tickwheel.flow.redis import REDIS_DOWN, RedisClient
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.ports import TenantAdmin
from tickwheel.store.tables import CassandraTables
from tickwheel.store.tenants import TENANT_OVERRIDES, Tenant, TenantChange

from .auth import revoke_everywhere
from .validation import check_url

MAX_WEIGHT = 1000


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser("tenants", help="create tenants, list them, rotate or revoke their API keys")
    commands = parser.add_subparsers(dest="tenants_command", required=True)
    create = commands.add_parser("create", help="create a tenant; its API key is the last line printed")
    create.add_argument("name")
    create.set_defaults(func=_with_store(_create))
    listing = commands.add_parser("list", help="list tenants and their keys")
    listing.set_defaults(func=_with_store(_list))
    keys = commands.add_parser("keys", help="rotate or revoke a tenant's API keys").add_subparsers(
        dest="keys_command", required=True
    )
    rotate = keys.add_parser("rotate", help="make a new key (printed last) and revoke the older ones")
    rotate.add_argument("name")
    rotate.set_defaults(func=_with_store(_rotate))
    revoke = keys.add_parser("revoke", help="revoke one key by its id")
    revoke.add_argument("name")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_with_store(_revoke))
    secrets = commands.add_parser("secrets", help="show or rotate the tenant's webhook signing secrets")
    secrets.add_argument("action", choices=("show", "rotate"))
    secrets.add_argument("name")
    secrets.set_defaults(func=_with_store(_secrets))
    change = commands.add_parser("set", help="override a tenant's retention, weight, job quota or notifications")
    change.add_argument("name")
    change.add_argument("--retention-days", type=int, help="keep runs, attempts, dead letters and history this long")
    change.add_argument("--weight", type=int, help=f"fair share of a lane against other tenants (1-{MAX_WEIGHT})")
    change.add_argument("--max-jobs", type=int, help="most jobs the tenant may have")
    change.add_argument("--notify-url", help="default URL for run-event notifications")
    change.add_argument("--notify-events", help="default events, comma-separated: " + ",".join(e for e in RunEvent))
    change.add_argument("--clear", action="append", default=[], choices=TENANT_OVERRIDES,
                        help="remove an override (back to the platform default); repeatable")  # fmt: skip
    change.set_defaults(func=_with_store(_set))


def _with_store(command: Callable[[TenantAdmin, argparse.Namespace], Awaitable[int]]) -> Any:
    """Run `command` on the tenants' store port over a connection of its own (the composition of these commands)."""

    def run(args: argparse.Namespace) -> Any:
        async def main() -> int:
            from tickwheel.cli import load_settings

            settings = load_settings()
            args.settings = settings
            store = await CassandraStore.connect(settings.cassandra)
            try:
                return await command(CassandraTables(store), args)
            finally:
                await store.close()

        return main()

    return run


async def _create(store: TenantAdmin, args: argparse.Namespace) -> int:
    tenant, key = await store.create_tenant(args.name, datetime.now(UTC))
    print(f"tenant {tenant.name} created (id {tenant.tenant_id})")
    print(f"webhook signing secret (verify `webhook-signature` with it): {tenant.signing_secrets[0]}")
    print("its API key, shown only now:")
    print(key)
    return 0


async def _list(store: TenantAdmin, args: argparse.Namespace) -> int:
    for tenant in await store.list_tenants():
        keys = await store.list_keys(tenant.tenant_id)
        live = ", ".join(k.key_id for k in keys if k.revoked_at is None) or "none"
        print(f"{tenant.name}\t{tenant.tenant_id}\tlive keys: {live}")
    return 0


async def _rotate(store: TenantAdmin, args: argparse.Namespace) -> int:
    tenant = await store.tenant_by_name(args.name)
    live = [k.key_id for k in await store.list_keys(tenant.tenant_id) if k.revoked_at is None]
    made, key = await store.rotate_key(tenant.tenant_id, datetime.now(UTC))
    await _revoke_on_every_api(live)
    print(f"new key {made.key_id} for {tenant.name}; older keys are revoked. The key, shown only now:")
    print(key)
    return 0


async def _revoke(store: TenantAdmin, args: argparse.Namespace) -> int:
    tenant = await store.tenant_by_name(args.name)
    await store.revoke_key(tenant.tenant_id, args.key_id, datetime.now(UTC))
    await _revoke_on_every_api([args.key_id])
    print(f"key {args.key_id} of {tenant.name} revoked")
    return 0


async def _revoke_on_every_api(key_ids: list[str]) -> None:
    """The revocation is durable in Cassandra; the Redis mark makes every API process refuse the keys now
    rather than when its key cache expires. Redis down: say so, the caches expire within api.auth_cache_s."""
    from tickwheel.cli import load_settings

    settings = load_settings()
    redis = RedisClient(settings.redis)
    try:
        await revoke_everywhere(redis, key_ids)
    except REDIS_DOWN as exc:
        delay = settings.api.auth_cache_s
        print(f"warning: Redis did not answer ({exc}); API processes refuse the key within {delay:g} s")
    finally:
        await redis.close()


async def _secrets(store: TenantAdmin, args: argparse.Namespace) -> int:
    """Signing secrets, newest first; a rotation keeps the previous one, and calls carry both signatures."""
    tenant = await store.tenant_by_name(args.name)
    if args.action == "rotate":
        tenant = await store.rotate_signing_secret(tenant.tenant_id)
        print(f"new signing secret for {tenant.name}; the previous one still signs until the next rotation")
    for position, secret in enumerate(tenant.signing_secrets):
        print(f"{'current' if position == 0 else 'previous'}\t{secret}")
    return 0


def tenant_change(args: argparse.Namespace, settings: Settings) -> TenantChange:
    """The overrides the `set` options ask for, checked (an InvalidInput names the option at fault)."""
    max_days = settings.retention.max_days
    if args.retention_days is not None and not 1 <= args.retention_days <= max_days:
        raise InvalidInput(f"--retention-days must be from 1 to {max_days}", field="--retention-days")
    if args.weight is not None and not 1 <= args.weight <= MAX_WEIGHT:
        raise InvalidInput(f"--weight must be from 1 to {MAX_WEIGHT}", field="--weight")
    if args.max_jobs is not None and args.max_jobs < 1:
        raise InvalidInput("--max-jobs must be at least 1", field="--max-jobs")
    if args.notify_url is not None:
        check_url(args.notify_url, "--notify-url")
    events = None
    if args.notify_events is not None:
        names = [e.strip() for e in args.notify_events.split(",") if e.strip()]
        unknown = sorted(set(names) - {e.value for e in RunEvent})
        if unknown:
            raise InvalidInput(f"unknown event {unknown[0]!r}; events: {', '.join(RunEvent)}", field="--notify-events")
        events = frozenset(names)
    change = TenantChange(
        retention_days=args.retention_days,
        weight=args.weight,
        max_jobs=args.max_jobs,
        notify_url=args.notify_url,
        notify_events=events,
        clear=frozenset(args.clear),
    )
    both = [name for name in change.clear if getattr(change, name) is not None]
    if both:
        raise InvalidInput(f"{both[0]} is both set and cleared", field="--clear")
    return change


async def _set(store: TenantAdmin, args: argparse.Namespace) -> int:
    change = tenant_change(args, args.settings)
    tenant = await store.tenant_by_name(args.name)
    tenant = await store.change_tenant(tenant.tenant_id, change)
    print(describe_overrides(tenant))
    return 0


def describe_overrides(tenant: Tenant) -> str:
    """One line per override, `default` where the platform's setting applies."""
    values = {
        "retention_days": tenant.retention_days,
        "weight": tenant.weight,
        "max_jobs": tenant.max_jobs,
        "notify_url": tenant.notify_url,
        "notify_events": ",".join(sorted(tenant.notify_events)) or None,
    }
    return "\n".join(f"{name}\t{'default' if value is None else value}" for name, value in values.items())
