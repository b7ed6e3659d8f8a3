"""The API behind the console: a tenant's due counts and unsaved-schedule preview, the operator endpoints
(operator key only), and the console's static files."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from schemas.messages import topic_names
from tests.conftest import own_keyspace
from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller, problem_of
from tickwheel.bus.kafka import KafkaProducer, delete_topics, ensure_topics
from tickwheel.settings import Settings
from tickwheel.store import checkpoints, operator
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.dead_letters import add_dead_letter
from tickwheel.store.tables import CassandraTables
from tickwheel.store.tenants import create_tenant

OPERATOR_KEY = "op-" + uuid.uuid4().hex
OPERATOR_HASH = hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()
NOW = datetime(2026, 3, 29, 0, 10, 30, tzinfo=UTC)  # Europe/Paris springs forward at 01:00 UTC this day


def every_5_min(**overrides: Any) -> dict[str, Any]:
    return cron_job(schedule={"type": "cron", "expr": "*/5 * * * *", "tz": "Europe/Paris"}, **overrides)


@pytest.fixture
async def clocked(make_client: Callable[..., Awaitable[TestClient]], store: CassandraStore) -> Caller:
    client = await make_client(clock=lambda: NOW)
    tenant_id = f"t{uuid.uuid4().hex[:12]}"
    _, key = await create_tenant(store, tenant_id, NOW, tenant_id=tenant_id)
    return Caller(tenant_id, key, client)


async def test_due_counts_project_the_callers_active_jobs_per_minute_and_per_hour(
    clocked: Caller, make_tenant: Callable[..., Awaitable[Caller]]
) -> None:
    assert (await clocked.call("POST", "/v1/jobs", json=every_5_min())).status == 201
    paused = await (await clocked.call("POST", "/v1/jobs", json=every_5_min())).json()
    answer = await clocked.call(
        "PATCH", f"/v1/jobs/{paused['id']}", json={"state": "PAUSED"}, headers={"If-Match": '"1"'}
    )
    assert answer.status == 200
    other = await make_tenant(clocked.client)
    assert (await other.call("POST", "/v1/jobs", json=every_5_min())).status == 201

    minutes = await (await clocked.call("GET", "/v1/due-counts")).json()
    hours = await (await clocked.call("GET", "/v1/due-counts?resolution=hour")).json()

    assert minutes["start"] == "2026-03-29T00:10:00.000+00:00" and minutes["bucket_s"] == 60
    # from now (00:10:30) to 02:10: 00:15, 00:20, ... 02:05; the run of 00:10 is past
    assert len(minutes["counts"]) == 120 and sum(minutes["counts"]) == 23
    assert minutes["counts"][:6] == [0, 0, 0, 0, 0, 1] and minutes["counts"][10] == 1
    assert minutes["jobs_counted"] == 1 and minutes["truncated"] is False
    assert hours["start"] == "2026-03-29T00:00:00.000+00:00" and len(hours["counts"]) == 168
    assert hours["counts"][0] == 9 and hours["counts"][1:4] == [12, 12, 12]  # 00:15 to 00:55


async def test_due_counts_refuse_an_unknown_resolution(clocked: Caller) -> None:
    problem = await problem_of(await clocked.call("GET", "/v1/due-counts?resolution=second"), 422)
    assert problem["field"] == "resolution"


async def test_schedule_preview_shows_local_times_and_dst_marks_of_an_unsaved_schedule(clocked: Caller) -> None:
    body = {"schedule": {"type": "cron", "expr": "30 2 * * *", "tz": "Europe/Paris"}, "count": 3}
    answer = await clocked.call("POST", "/v1/schedules/preview", json=body)

    fires = (await answer.json())["fires"]
    assert answer.status == 200 and len(fires) == 3
    # 02:30 does not exist on 29 March in Paris: the default policy runs it just after the gap, marked
    assert fires[0]["dst"] is not None and fires[0]["local"].startswith("2026-03-29T03:00")
    assert fires[1] == {
        "at": "2026-03-30T00:30:00.000+00:00", "local": "2026-03-30T02:30:00+02:00", "dst": None, "expr": "30 2 * * *",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"schedule": {"type": "cron", "expr": "61 * * * *", "tz": "UTC"}}, "schedule.expr"),
        ({"schedule": {"type": "cron", "expr": "* * * * *", "tz": "Mars/Olympus"}}, "schedule.tz"),
        ({"schedule": {"type": "cron", "expr": "0 9 * * *", "tz": "UTC"}, "colour": "red"}, "colour"),
        ({"schedule": {"type": "cron", "expr": "0 9 * * *", "tz": "UTC"}, "count": 0}, "count"),
        ({"schedule": {"type": "interval", "everyS": 1}}, "schedule.everyS"),
    ],
)
async def test_schedule_preview_names_the_field_at_fault_as_a_create_would(
    clocked: Caller, body: dict[str, Any], field: str
) -> None:
    problem = await problem_of(await clocked.call("POST", "/v1/schedules/preview", json=body), 422)
    assert problem["field"] == field
    create = cron_job(schedule=body["schedule"]) if field.startswith("schedule.") else None
    if create is not None:
        created = await problem_of(await clocked.call("POST", "/v1/jobs", json=create), 422)
        assert created["field"] == field


OPERATOR_PATHS = ["/v1/operator/lanes", "/v1/operator/shards", "/v1/operator/forecast", "/v1/operator/sweeper",
                  "/v1/operator/dead-letters"]  # fmt: skip


@pytest.mark.parametrize("path", OPERATOR_PATHS)
async def test_operator_endpoints_refuse_tenant_keys_wrong_keys_and_an_unset_key(
    make_client: Callable[..., Awaitable[TestClient]], make_tenant: Callable[..., Awaitable[Caller]], path: str
) -> None:
    configured = await make_client(operator_key_sha256=OPERATOR_HASH)
    unset = await make_client(operator_key_sha256="")
    tenant = await make_tenant(configured)

    assert (await tenant.call("GET", path)).status == 401
    assert (await configured.get(path, headers={"Authorization": "Bearer op-wrong"})).status == 401
    assert (await configured.get(path)).status == 401
    problem = await problem_of(await unset.get(path, headers={"Authorization": f"Bearer {OPERATOR_KEY}"}), 401)
    assert "TICKWHEEL_API_OPERATOR_KEY_SHA256" in problem["detail"]


def operator_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {OPERATOR_KEY}"}


async def test_the_shard_map_shows_each_checkpoints_owner_and_epoch_as_ranges(
    own_client: Callable[..., Awaitable[TestClient]], store: CassandraStore, settings: Settings
) -> None:
    # Shards past the run's shard count, so no dispatcher test of this run ever writes (or is fenced on) them.
    extra = list(range(settings.shards, settings.shards + 6))
    client = await own_client(shards=settings.shards + len(extra))
    now = datetime.now(UTC)
    epoch = await checkpoints.highest_epoch(store) + 1000
    await checkpoints.advance(store, dict.fromkeys(extra[:4], now), epoch, "m-a", now)
    await checkpoints.advance(store, dict.fromkeys(extra[4:], now), epoch, "m-b", now)

    document = await (await client.get("/v1/operator/shards", headers=operator_headers())).json()

    assert document["shards"] == settings.shards + 6 == len(document["cells"])
    cell = document["cells"][extra[4]]
    assert (cell["shard"], cell["owner"], cell["epoch"]) == (extra[4], "m-b", epoch) and cell["fired_through"]
    assert [r for r in document["ranges"] if r["epoch"] == epoch] == [
        {"owner": "m-a", "epoch": epoch, "start": extra[0], "end": extra[4]},
        {"owner": "m-b", "epoch": epoch, "start": extra[4], "end": extra[-1] + 1},
    ]


async def test_forecast_sweeper_and_dead_letter_rates_read_the_store(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    client = await make_client(operator_key_sha256=OPERATOR_HASH)
    tenant = await make_tenant(client)
    sweeps_before, repairs_before = await operator.sweeper_counts(store)
    await operator.add_sweep(store, {"overdue": 2, "missing_run": 0})
    now = datetime.now(UTC)
    for ago_s in (60, 120, 7200):
        await add_dead_letter(store, tenant_id=tenant.tenant_id, run_id=uuid.uuid4(), job_id=uuid.uuid4(),
                              target_host="example.com", payload=b"", last_error="500", attempts=[],
                              dead_at=now - timedelta(seconds=ago_s), ttl_s=86400)  # fmt: skip

    forecast = await (await client.get("/v1/operator/forecast?minutes=3", headers=operator_headers())).json()
    sweeper = await (await client.get("/v1/operator/sweeper", headers=operator_headers())).json()
    dead = await (await client.get("/v1/operator/dead-letters", headers=operator_headers())).json()

    assert len(forecast["counts"]) == 3 and all(c >= 0 for c in forecast["counts"])
    assert sweeper["sweeps"] == sweeps_before + 1
    assert sweeper["repairs"]["overdue"] == repairs_before.get("overdue", 0) + 2
    mine = next(t for t in dead["items"] if t["tenant_id"] == tenant.tenant_id)
    assert (mine["last_hour"], mine["last_day"]) == (2, 3)


@pytest.fixture
def own_client(
    settings: Settings, make_client: Callable[..., Awaitable[TestClient]]
) -> Callable[..., Awaitable[TestClient]]:
    """own_client(**settings changes) -> a client on an app with the operator key and those settings."""

    async def make(**changes: Any) -> TestClient:
        own = dataclasses.replace(settings, **changes)
        return await make_client(settings_=own, operator_key_sha256=OPERATOR_HASH)

    return make


async def test_lane_lag_counts_what_the_workers_group_has_not_committed(
    own_client: Callable[..., Awaitable[TestClient]], settings: Settings, producer: KafkaProducer
) -> None:
    # Topics of its own, so no other test's workers consume or commit on them.
    kafka = dataclasses.replace(settings.kafka, topic_prefix=f"lag{uuid.uuid4().hex[:8]}.")
    topics = topic_names(kafka.topic_prefix)
    await ensure_topics(kafka, dict.fromkeys(topics.values(), 2))
    client = await own_client(kafka=kafka)
    for i in range(3):
        await producer.send(topics["urgent"], b"{}", key=str(i).encode())

    # A 503 is the endpoint's answer while a busy broker has not yet placed the new group's coordinator:
    # retryable by contract, so retried here as a client would; anything else fails at once.
    for _ in range(30):
        response = await client.get("/v1/operator/lanes", headers=operator_headers())
        if response.status != 503:
            break
        await asyncio.sleep(1)
    assert response.status == 200, await response.text()
    document = await response.json()

    await delete_topics(kafka, kafka.topic_prefix)
    lags = {item["lane"]: item for item in document["items"]}
    assert lags["urgent"]["lag"] == 3 and lags["urgent"]["group"] == f"{kafka.topic_prefix}tickwheel-worker-urgent"
    assert lags["default"]["lag"] == 0 and lags["bulk"]["partitions"] == 2


async def test_the_console_is_served_offline_with_a_strict_content_policy(
    own_client: Callable[..., Awaitable[TestClient]],
) -> None:
    client = await own_client()

    redirect = await client.get("/console", allow_redirects=False)
    page = await client.get("/console/")
    html = await page.text()
    script = await client.get("/console/static/app.js")

    assert redirect.status == 302 and redirect.headers["Location"] == "/console/"
    assert page.status == 200 and "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert "http://" not in html and "https://" not in html  # nothing from another origin
    assert script.status == 200 and "javascript" in script.content_type


async def test_every_sweeper_pass_is_counted_where_the_operator_page_reads_it(
    settings: Settings, producer: KafkaProducer
) -> None:
    from coordinator.sweeper import Sweeper

    # A keyspace of its own: a whole pass over this run's shared jobs table could repair other tests' jobs.
    async with own_keyspace(settings, "sweep") as (own, store):
        before, _ = await operator.sweeper_counts(store)
        sweeper = Sweeper(own, CassandraTables(store), producer)
        await sweeper.sweep(datetime.now(UTC))
        await sweeper.sweep(datetime.now(UTC))
        after, repairs = await operator.sweeper_counts(store)

    assert after == before + 2 and repairs == {}
