"""The audit log and dead-letter retention through the API on the real servers: every job change is recorded
with its version, key id, time and diff; dead letters are purged one by one or by filter; both are kept for the
tenant's retention and stay inside the tenant."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller
from tests.integration.api.test_runs_api import running_run
from tickwheel.core.retention import DAY_S
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.dead_letters import add_dead_letter
from tickwheel.store.tenants import TenantChange, change_tenant, hash_key, key_id_of


async def history_of(caller: Caller, job_id: str, query: str = "") -> dict:
    answer = await caller.call("GET", f"/v1/jobs/{job_id}/history{query}")
    assert answer.status == 200, await answer.text()
    document: dict = await answer.json()
    return document


async def test_every_change_is_recorded_newest_first_with_version_key_and_diff(alice: Caller) -> None:
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    edit = {"schedule": {"type": "cron", "expr": "30 9 * * *", "tz": "Europe/Paris"}}
    assert (await alice.call("PATCH", path, json=edit, headers={"If-Match": "1"})).status == 200
    assert (await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": "2"})).status == 200
    assert (await alice.call("PATCH", path, json={"state": "ACTIVE"}, headers={"If-Match": "3"})).status == 200
    assert (await alice.call("DELETE", path)).status == 204

    items = (await history_of(alice, job["id"]))["items"]
    assert [(c["action"], c["version"]) for c in items] == [
        ("delete", 5), ("resume", 4), ("pause", 3), ("edit", 2), ("create", 1),
    ]  # fmt: skip
    assert {c["key_id"] for c in items} == {key_id_of(hash_key(alice.key))}
    assert all(datetime.fromisoformat(c["changed_at"]) <= datetime.now(UTC) for c in items)
    assert items[3]["diff"] == [{"op": "replace", "path": "/schedule/expr", "old": "0 9 * * *", "value": "30 9 * * *"}]
    assert items[2]["diff"] == [{"op": "replace", "path": "/state", "old": "ACTIVE", "value": "PAUSED"}]
    created = {c["path"]: c for c in items[4]["diff"]}
    assert created["/state"]["value"] == "ACTIVE" and created["/target"]["op"] == "add"


async def test_history_pages_with_a_cursor_and_belongs_to_its_tenant(alice: Caller, bob: Caller) -> None:
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    for version in range(1, 4):
        labels = {"labels": {"n": str(version)}}
        assert (await alice.call("PATCH", f"/v1/jobs/{job['id']}", json=labels, headers={"If-Match": str(version)})).ok
    first = await history_of(alice, job["id"], "?limit=3")
    assert len(first["items"]) == 3 and "next_cursor" in first
    rest = await history_of(alice, job["id"], f"?limit=3&cursor={first['next_cursor']}")
    assert [c["version"] for c in first["items"] + rest["items"]] == [4, 3, 2, 1] and "next_cursor" not in rest
    assert (await bob.call("GET", f"/v1/jobs/{job['id']}/history")).status == 404
    forged = await bob.call("GET", f"/v1/jobs/{job['id']}/history?cursor={first['next_cursor']}")
    assert forged.status == 404
    tampered = await alice.call("GET", f"/v1/jobs/{job['id']}/history?cursor=x{first['next_cursor']}")
    assert tampered.status == 422 and (await tampered.json())["field"] == "cursor"
    bad_limit = await alice.call("GET", f"/v1/jobs/{job['id']}/history?limit=0")
    assert bad_limit.status == 422 and (await bad_limit.json())["field"] == "limit"


async def test_audit_rows_live_for_the_tenants_retention(alice: Caller, store: CassandraStore) -> None:
    await change_tenant(store, alice.tenant_id, TenantChange(retention_days=7))
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    rows = await store.execute("SELECT TTL(action) AS ttl FROM job_history WHERE job_id = ?", [uuid.UUID(job["id"])])
    assert [r["ttl"] for r in rows] and 7 * DAY_S - 60 <= rows[0]["ttl"] <= 7 * DAY_S


async def dead_letter(alice: Caller, store: CassandraStore, host: str = "example.com") -> tuple[dict, runs.NewRun]:
    job, run = await running_run(alice, store)
    now = datetime.now(UTC)
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.DEAD, error="HTTP 410"), "w1", now, now)
    await add_dead_letter(
        store, tenant_id=alice.tenant_id, run_id=run.run_id, job_id=run.job_id, target_host=host,
        payload=b"{}", last_error="HTTP 410", attempts=[], dead_at=now, ttl_s=3 * DAY_S,
    )  # fmt: skip
    return job, run


async def letter_ids(caller: Caller) -> list[str]:
    return [d["run_id"] for d in (await (await caller.call("GET", "/v1/dead-letters")).json())["items"]]


async def test_a_dead_letter_is_deleted_once_by_its_tenant_only(alice: Caller, bob: Caller, store: CassandraStore):
    _, run = await dead_letter(alice, store)
    path = f"/v1/dead-letters/{run.run_id}"
    assert (await bob.call("DELETE", path)).status == 404
    assert await letter_ids(alice) == [str(run.run_id)]
    first = await alice.call("DELETE", path, headers={"Idempotency-Key": "purge-1"})
    assert first.status == 204
    replay = await alice.call("DELETE", path, headers={"Idempotency-Key": "purge-1"})
    assert replay.status == 204 and replay.headers.get("Idempotent-Replayed") == "true"
    assert (await alice.call("DELETE", path)).status == 404
    assert await letter_ids(alice) == []
    assert (await alice.call("POST", f"{path}/redrive")).status == 404
    row = await runs.get_run(store, run.run_id)
    assert row is not None and row.status == "DEAD", "purging the letter keeps the run"
    assert (await alice.call("DELETE", "/v1/dead-letters/not-a-uuid")).status == 404


async def test_a_bulk_purge_filters_says_what_a_dry_run_would_delete_and_validates(
    alice: Caller, store: CassandraStore
):
    _, kept = await dead_letter(alice, store, "keep.example")
    _, gone = await dead_letter(alice, store, "gone.example")
    dry = await (
        await alice.call("POST", "/v1/dead-letters/purge", json={"targetHost": "gone.example", "dryRun": True})
    ).json()
    assert dry == {"dry_run": True, "matched": 1, "run_ids": [str(gone.run_id)]}
    assert sorted(await letter_ids(alice)) == sorted([str(kept.run_id), str(gone.run_id)])
    done = await (await alice.call("POST", "/v1/dead-letters/purge", json={"targetHost": "gone.example"})).json()
    assert done == {"dry_run": False, "matched": 1, "purged": 1, "run_ids": [str(gone.run_id)]}
    assert await letter_ids(alice) == [str(kept.run_id)]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    none = await (await alice.call("POST", "/v1/dead-letters/purge", json={"since": later})).json()
    assert none["matched"] == 0
    for body, field in [({"limit": 0}, "limit"), ({"dryRun": "yes"}, "dryRun"), ({"jobId": "x"}, "jobId"),
                        ({"since": "yesterday"}, "since"), ({"colour": 1}, "colour")]:  # fmt: skip
        answer = await alice.call("POST", "/v1/dead-letters/purge", json=body)
        assert answer.status == 422 and (await answer.json())["field"] == field, body
    assert (await alice.call("POST", "/v1/dead-letters/purge", data=b"{")).status == 400


async def test_a_redrive_is_recorded_in_the_jobs_history(alice: Caller, store: CassandraStore) -> None:
    job, run = await dead_letter(alice, store)
    assert (await alice.call("POST", f"/v1/dead-letters/{run.run_id}/redrive")).status == 202
    latest = (await history_of(alice, job["id"]))["items"][0]
    assert latest["action"] == "redrive" and latest["detail"] == {"run_id": str(run.run_id)}
    assert latest["diff"] == [] and latest["version"] == 1


async def test_a_jobs_notification_route_is_stored_and_checked_naming_the_field(alice: Caller) -> None:
    route = {"url": "https://hooks.example/tw", "events": ["failed", "recovered"]}
    made = await alice.call("POST", "/v1/jobs", json=cron_job(notify=route))
    assert made.status == 201 and (await made.json())["notify"] == route
    for notify, field in [
        ({"events": ["exploded"]}, "notify.events"),
        ({"url": "ftp://hooks.example"}, "notify.url"),
        ({"url": "https://hooks.example", "colour": "red"}, "notify.colour"),
    ]:
        answer = await alice.call("POST", "/v1/jobs", json=cron_job(notify=notify))
        problem = await answer.json()
        assert answer.status == 422 and problem["field"].startswith(field), (notify, problem)
