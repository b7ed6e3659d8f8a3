"""`tickwheel tenants ...` on the real store: the key is the last line and authenticates; secrets rotate."""

from __future__ import annotations

import asyncio
import sys
import uuid

from tickwheel.settings import Settings
from tickwheel.store import tenants
from tickwheel.store.cassandra import CassandraStore


async def tickwheel(settings: Settings, *args: str) -> list[str]:
    env = settings.process_env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickwheel.cli", *args, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out
    return out.decode().strip().splitlines()


async def test_a_created_tenants_key_is_the_last_line_and_authenticates(
    settings: Settings, store: CassandraStore
) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    lines = await tickwheel(settings, "tenants", "create", name)
    tenant = await tenants.tenant_by_name(store, name)
    assert await tenants.authenticate(store, lines[-1]) == tenant.tenant_id
    assert any(tenant.signing_secrets[0] in line for line in lines)


async def test_rotating_the_signing_secret_keeps_the_previous_one(settings: Settings, store: CassandraStore) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    await tickwheel(settings, "tenants", "create", name)
    before = (await tenants.tenant_by_name(store, name)).signing_secrets
    lines = await tickwheel(settings, "tenants", "secrets", "rotate", name)
    after = (await tenants.tenant_by_name(store, name)).signing_secrets
    assert after[1:] == before and after[0] != before[0] and after[0].startswith("whsec_")
    assert lines[-2:] == [f"current\t{after[0]}", f"previous\t{before[0]}"]


async def test_set_writes_a_tenants_overrides_and_clear_removes_one(settings: Settings, store: CassandraStore) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    await tickwheel(settings, "tenants", "create", name)
    lines = await tickwheel(
        settings, "tenants", "set", name, "--retention-days", "90", "--weight", "4", "--max-jobs", "50",
        "--notify-url", "https://ops.example/tw", "--notify-events", "dead,missed",
    )  # fmt: skip
    tenant = await tenants.tenant_by_name(store, name)
    assert (tenant.retention_days, tenant.weight, tenant.max_jobs) == (90, 4, 50)
    assert tenant.notify_url == "https://ops.example/tw" and tenant.notify_events == {"dead", "missed"}
    assert "retention_days\t90" in lines and "notify_events\tdead,missed" in lines
    await tickwheel(settings, "tenants", "set", name, "--clear", "weight", "--clear", "notify_url")
    tenant = await tenants.tenant_by_name(store, name)
    assert tenant.weight is None and tenant.notify_url is None and tenant.retention_days == 90


async def test_set_refuses_a_bad_value_naming_the_option_and_writes_nothing(
    settings: Settings, store: CassandraStore
) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    await tickwheel(settings, "tenants", "create", name)
    env = settings.process_env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickwheel.cli", "tenants", "set", name, "--max-jobs", "5", "--weight", "0",
        env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode == 2 and b"--weight" in err
    assert (await tenants.tenant_by_name(store, name)).max_jobs is None


async def test_revoking_a_key_marks_it_for_every_api_process(settings: Settings, store: CassandraStore) -> None:
    from api.auth import key_id_of, revoked_mark
    from tickwheel.flow.redis import RedisClient

    name = f"cli-{uuid.uuid4().hex[:8]}"
    key = (await tickwheel(settings, "tenants", "create", name))[-1]
    await tickwheel(settings, "tenants", "keys", "revoke", name, key_id_of(key))
    redis = RedisClient(settings.redis)  # the platform's own prefix, as the API processes use it
    try:
        assert await redis.redis.exists(revoked_mark(redis, key_id_of(key)))
    finally:
        await redis.close()


async def test_rotating_keys_revokes_the_older_ones_and_the_listing_shows_the_live_one(
    settings: Settings, store: CassandraStore
) -> None:
    from api.auth import key_id_of

    name = f"cli-{uuid.uuid4().hex[:8]}"
    first = (await tickwheel(settings, "tenants", "create", name))[-1]
    second = (await tickwheel(settings, "tenants", "keys", "rotate", name))[-1]
    tenant = await tenants.tenant_by_name(store, name)
    assert await tenants.authenticate(store, first) is None
    assert await tenants.authenticate(store, second) == tenant.tenant_id
    listed = [line for line in await tickwheel(settings, "tenants", "list") if line.startswith(f"{name}\t")]
    assert listed == [f"{name}\t{tenant.tenant_id}\tlive keys: {key_id_of(second)}"]
