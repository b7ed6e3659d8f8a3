"""Every run row the API writes is kept for its tenant's run retention past the run's due time (a tenant of 3 days
and one of 90, both unlike the tables' 30-day default): read back as TTL(column) from Cassandra."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api.api_bodies import cron_job, once_job
from tests.integration.api.conftest import Caller, existing_run
from tickwheel.core.retention import DAY_S
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.dead_letters import add_dead_letter
from tickwheel.store.tenants import TenantChange, change_tenant

SLACK_S = 120  # between the API's clock at the write and this test's at the read, on a loaded box


async def ttl_s(store: CassandraStore, cql: str, key: list[object]) -> int:
    rows = await store.execute(cql, key)
    assert rows and rows[0]["ttl"] is not None, f"no TTL: {cql}"
    ttl: int = rows[0]["ttl"]
    return ttl


async def run_ttl(store: CassandraStore, run_id: uuid.UUID, column: str = "status") -> int:
    return await ttl_s(store, f"SELECT TTL({column}) AS ttl FROM runs WHERE run_id = ?", [run_id])


async def history_ttl(store: CassandraStore, job_id: uuid.UUID, run_id: uuid.UUID) -> int:
    return await ttl_s(
        store, "SELECT TTL(status) AS ttl FROM runs_by_job WHERE job_id = ? AND run_id = ? ALLOW FILTERING",
        [job_id, run_id],
    )  # fmt: skip


def kept_for(ttl: int, until: datetime, retention_s: int) -> bool:
    """Whether a TTL read now ends at `until` plus the retention (within the slack)."""
    expected = max(0, int((until - datetime.now(UTC)).total_seconds())) + retention_s
    return expected - SLACK_S <= ttl <= expected + 5


@pytest.fixture(params=[3, 90], ids=["3 days", "90 days"])
async def tenant(request: pytest.FixtureRequest, alice: Caller, store: CassandraStore) -> tuple[Caller, int]:
    days: int = request.param
    await change_tenant(store, alice.tenant_id, TenantChange(retention_days=days))
    return alice, days * DAY_S


async def test_runs_made_by_create_edit_trigger_and_backfill_keep_the_tenants_retention(
    tenant: tuple[Caller, int], store: CassandraStore
) -> None:
    alice, kept = tenant
    far_at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=400)
    far = await (await alice.call("POST", "/v1/jobs", json=once_job(far_at))).json()
    far_run = uuid.UUID(far["next_run_id"])
    assert kept_for(await run_ttl(store, far_run), far_at, kept), "a far run outlives its due time"
    assert kept_for(await history_ttl(store, uuid.UUID(far["id"]), far_run), far_at, kept)

    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    job_id, first = uuid.UUID(job["id"]), uuid.UUID(job["next_run_id"])
    first_at = datetime.fromisoformat(job["next_run_at"])
    assert kept_for(await run_ttl(store, first), first_at, kept)
    assert kept_for(await history_ttl(store, job_id, first), first_at, kept)

    for version, change in enumerate(({"labels": {"team": "data"}}, {"state": "PAUSED"}, {"state": "ACTIVE"}), 1):
        answer = await alice.call("PATCH", f"/v1/jobs/{job_id}", json=change, headers={"If-Match": str(version)})
        assert answer.status == 200, await answer.text()
    resumed = await (await alice.call("GET", f"/v1/jobs/{job_id}")).json()
    assert resumed["next_run_id"] == str(first), "the same occurrence: retargeted, cancelled, revived"
    assert kept_for(await run_ttl(store, first, "job_version"), first_at, kept)
    assert kept_for(await run_ttl(store, first, "status"), first_at, kept)
    edit = {"schedule": {"type": "cron", "expr": "30 9 * * *", "tz": "Europe/Paris"}}
    edited = await (await alice.call("PATCH", f"/v1/jobs/{job_id}", json=edit, headers={"If-Match": "4"})).json()
    assert kept_for(await run_ttl(store, first, "finished_at"), first_at, kept), "the replaced run, cancelled"
    second, second_at = uuid.UUID(edited["next_run_id"]), datetime.fromisoformat(edited["next_run_at"])
    assert kept_for(await run_ttl(store, second), second_at, kept)

    triggered = await (await alice.call("POST", f"/v1/jobs/{job_id}/trigger")).json()
    now = datetime.now(UTC)
    assert kept_for(await run_ttl(store, uuid.UUID(triggered["id"])), now, kept)
    assert kept_for(await history_ttl(store, job_id, uuid.UUID(triggered["id"])), now, kept)

    end = now.replace(minute=0, second=0, microsecond=0)
    span = {"from": (end - timedelta(days=2)).isoformat(), "to": end.isoformat()}
    made = await alice.call("POST", f"/v1/jobs/{job_id}/backfill", json=span)
    assert made.status == 201, await made.text()
    for run in (await made.json())["runs"]:
        assert kept_for(await run_ttl(store, uuid.UUID(run["id"])), now, kept)


async def test_heartbeats_and_redrives_keep_the_tenants_retention(
    tenant: tuple[Caller, int], store: CassandraStore
) -> None:
    alice, kept = tenant
    due = datetime.now(UTC) + timedelta(seconds=5)  # a redriven run is due now, its occurrence just past
    job = await (await alice.call("POST", "/v1/jobs", json=once_job(due))).json()
    run = await existing_run(store, uuid.UUID(job["next_run_id"]))
    now = datetime.now(UTC)
    assert (await runs.claim(store, run, 0, "w1", now + timedelta(seconds=60), now)).applied
    beat = await alice.call("POST", f"/v1/runs/{run.run_id}/heartbeat", json={"attempt": 1, "extendByS": 600})
    assert beat.status == 200, await beat.text()
    lease_until = datetime.fromisoformat((await beat.json())["lease_until"])
    assert kept_for(await run_ttl(store, run.run_id, "lease_until"), lease_until, kept)

    now = datetime.now(UTC)
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.DEAD, error="HTTP 500"), "w1", now, now)
    await add_dead_letter(
        store, tenant_id=alice.tenant_id, run_id=run.run_id, job_id=run.job_id, target_host="example.com",
        payload=b"{}", last_error="HTTP 500", attempts=[], dead_at=now, ttl_s=DAY_S,
    )  # fmt: skip
    redriven = await alice.call("POST", f"/v1/dead-letters/{run.run_id}/redrive")
    assert redriven.status in (200, 202), await redriven.text()
    now = datetime.now(UTC)
    assert kept_for(await run_ttl(store, run.run_id), now, kept)
    assert kept_for(await history_ttl(store, run.job_id, run.run_id), now, kept)
    rows = await store.execute("SELECT kind, TTL(outcome) AS ttl FROM run_attempts WHERE run_id = ?", [run.run_id])
    [redrive] = [r["ttl"] for r in rows if r["kind"] == "redrive"]
    assert kept_for(redrive, now, kept)
