"""Jobs through the HTTP API on the real Cassandra, Kafka and Redis."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from schemas.messages import decode_due_run, topic_names
from tests.integration.api.api_bodies import cron_job, once_job
from tests.integration.api.conftest import Caller, existing_run, problem_of
from tickwheel.bus.kafka import KafkaConsumer
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.settings import Settings
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore


async def test_create_answers_201_after_the_job_and_its_first_run_are_written(alice: Caller, store: CassandraStore):
    response = await alice.call("POST", "/v1/jobs", json=cron_job())
    assert response.status == 201, await response.text()
    job = await response.json()
    assert response.headers["ETag"] == '"1"'
    assert job["state"] == "ACTIVE" and job["version"] == 1
    assert job["schedule"]["expr"] == "0 9 * * *" and job["payload"] == {"report": "daily"}
    next_run_at = datetime.fromisoformat(job["next_run_at"])
    assert next_run_at.utcoffset() == timedelta(0)
    assert next_run_at > datetime.now(UTC)
    job_id = uuid.UUID(job["id"])
    run_id = run_id_for(job_id, next_run_at)
    runs = await store.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    assert runs[0]["status"] == "SCHEDULED" and runs[0]["shard"] == shard_of(job_id)
    history = await store.execute("SELECT run_id FROM runs_by_job WHERE job_id = ?", [job_id])
    assert [r["run_id"] for r in history] == [run_id]
    bucket = next_run_at.replace(second=0, microsecond=0)
    rows = await store.execute(
        "SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?", [bucket, shard_of(job_id)]
    )
    assert run_id in [r["run_id"] for r in rows]
    listed = await store.execute("SELECT job_id FROM jobs_by_tenant WHERE tenant_id = ?", [alice.tenant_id])
    assert [r["job_id"] for r in listed] == [job_id]


async def test_a_run_due_inside_the_horizon_is_announced_on_the_near_topic(alice: Caller, settings: Settings):
    topic = topic_names(settings.kafka.topic_prefix)["near"]
    consumer = KafkaConsumer(settings.kafka)
    ends = await consumer.end_offsets(topic, range(settings.kafka.near_partitions))
    run_at = datetime.now(UTC) + timedelta(seconds=30)
    response = await alice.call("POST", "/v1/jobs", json=once_job(run_at))
    assert response.status == 201
    job = await response.json()
    await consumer.assign([(topic, p, ends[p]) for p in ends])
    found = []
    deadline = asyncio.get_running_loop().time() + 30  # a consumer's first fetch can take seconds on a loaded box
    while asyncio.get_running_loop().time() < deadline:
        found += [decode_due_run(r.value) for r in await consumer.poll(timeout_s=0.5)]
        if any(str(d.job_id) == job["id"] for d in found):
            break
    await consumer.close()
    announced = [d for d in found if str(d.job_id) == job["id"]]
    assert len(announced) == 1
    assert announced[0].tenant_id == alice.tenant_id and announced[0].kind == "run" and announced[0].attempt == 0
    assert announced[0].scheduled_at_ms == int(run_at.timestamp() * 1000)


async def test_get_list_patch_and_delete_keep_two_tenants_apart(alice: Caller, bob: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    assert (await alice.call("GET", path)).status == 200
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", path, {}),
        ("GET", f"{path}/runs", {}),
        ("GET", f"{path}/preview", {}),
        ("PATCH", path, {"json": {"state": "PAUSED"}, "headers": {"If-Match": '"1"'}}),
        ("DELETE", path, {}),
        ("GET", f"/v1/runs/{job['next_run_id']}", {}),
        ("POST", f"/v1/runs/{job['next_run_id']}/heartbeat", {"json": {"attempt": 1}}),
        ("POST", f"/v1/dead-letters/{job['next_run_id']}/redrive", {}),
    ]
    for method, url, kwargs in requests:
        response = await bob.call(method, url, **kwargs)
        assert response.status == 404, (method, url, await response.text())
        assert response.content_type == "application/problem+json"
    assert (await (await bob.call("GET", "/v1/jobs")).json())["items"] == []
    assert (await (await bob.call("GET", "/v1/dead-letters")).json())["items"] == []
    still = await (await alice.call("GET", path)).json()
    assert still["state"] == "ACTIVE" and still["version"] == 1


async def test_get_shows_the_definition_next_run_and_etag(alice: Caller):
    created = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    response = await alice.call("GET", f"/v1/jobs/{created['id']}")
    job = await response.json()
    assert response.headers["ETag"] == '"1"'
    assert job["next_run_at"] == created["next_run_at"] and job["target"]["url"] == "https://example.com/hook"
    assert job["labels"] == {"team": "ops"} and "last_run" not in job


async def test_pause_cancels_the_run_and_resume_writes_the_next_occurrence(alice: Caller, store: CassandraStore):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    paused = await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": '"1"'})
    assert paused.status == 200 and paused.headers["ETag"] == '"2"'
    body = await paused.json()
    assert body["state"] == "PAUSED" and body["next_run_at"] is None
    old = await store.execute("SELECT status FROM runs WHERE run_id = ?", [uuid.UUID(job["next_run_id"])])
    assert old[0]["status"] == "CANCELLED"
    resumed = await (await alice.call("PATCH", path, json={"state": "ACTIVE"}, headers={"If-Match": '"2"'})).json()
    assert resumed["state"] == "ACTIVE" and resumed["version"] == 3
    assert resumed["next_run_at"] == job["next_run_at"]  # the same 09:00 Paris occurrence, scheduled again
    again = await store.execute(
        "SELECT status, job_version FROM runs WHERE run_id = ?", [uuid.UUID(job["next_run_id"])]
    )
    assert again[0] == {"status": "SCHEDULED", "job_version": 3}
    runs = await (await alice.call("GET", f"{path}/runs?status=SCHEDULED")).json()
    assert [r["id"] for r in runs["items"]] == [job["next_run_id"]]


async def test_reschedule_cancels_the_old_run_and_writes_the_new_one(alice: Caller, store: CassandraStore):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    schedule = {"type": "cron", "expr": "30 18 * * 1-5", "tz": "America/New_York"}
    response = await alice.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"schedule": schedule}, headers={"If-Match": "1"}
    )
    changed = await response.json()
    assert response.status == 200 and changed["schedule"]["expr"] == "30 18 * * 1-5"
    assert changed["next_run_id"] != job["next_run_id"]
    local = datetime.fromisoformat(changed["next_run_at"]).astimezone(ZoneInfo("America/New_York"))
    assert (local.hour, local.minute) == (18, 30)
    statuses = {
        r["run_id"]: r["status"]
        for r in await store.execute("SELECT run_id, status FROM runs_by_job WHERE job_id = ?", [uuid.UUID(job["id"])])
    }
    assert statuses == {uuid.UUID(job["next_run_id"]): "CANCELLED", uuid.UUID(changed["next_run_id"]): "SCHEDULED"}


async def test_an_edit_that_keeps_the_schedule_keeps_the_run_at_the_new_version(alice: Caller, store: CassandraStore):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    response = await alice.call("PATCH", f"/v1/jobs/{job['id']}", json={"payload": {"v": 2}}, headers={"If-Match": "1"})
    edited = await response.json()
    assert edited["payload"] == {"v": 2} and edited["next_run_id"] == job["next_run_id"]
    run = await store.execute("SELECT status, job_version FROM runs WHERE run_id = ?", [uuid.UUID(job["next_run_id"])])
    assert run[0] == {"status": "SCHEDULED", "job_version": 2}


async def test_patch_needs_if_match_and_refuses_a_stale_one(alice: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    missing = await alice.call("PATCH", path, json={"state": "PAUSED"})
    assert missing.status == 428
    stale = await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": '"7"'})
    assert stale.status == 412 and (await stale.json())["field"] == "If-Match"


async def test_two_racing_patches_with_the_same_version_one_wins_one_gets_412(alice: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    first, second = await asyncio.gather(
        alice.call("PATCH", path, json={"labels": {"who": "first"}}, headers={"If-Match": '"1"'}),
        alice.call("PATCH", path, json={"labels": {"who": "second"}}, headers={"If-Match": '"1"'}),
    )
    assert sorted([first.status, second.status]) == [200, 412]
    winner = first if first.status == 200 else second
    final = await (await alice.call("GET", path)).json()
    assert final["version"] == 2 and final["labels"] == (await winner.json())["labels"]


async def test_delete_is_soft_and_cancels_the_unstarted_run(alice: Caller, store: CassandraStore):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    assert (await alice.call("DELETE", path)).status == 204
    gone = await alice.call("GET", path)
    assert (await problem_of(gone, 404))["detail"] == f"job {job['id']} was deleted"  # found by schemathesis' ST301
    assert (await alice.call("GET", f"{path}/runs")).status == 200  # the history outlives the job
    run = await store.execute("SELECT status FROM runs WHERE run_id = ?", [uuid.UUID(job["next_run_id"])])
    assert run[0]["status"] == "CANCELLED"
    assert (await (await alice.call("GET", "/v1/jobs")).json())["items"] == []
    assert (await alice.call("DELETE", path)).status == 204
    assert (await alice.call("PATCH", path, json={"state": "ACTIVE"}, headers={"If-Match": '"2"'})).status == 409
    assert (await alice.call("GET", f"{path}/preview")).status == 404  # found by schemathesis' use_after_free


async def test_the_same_idempotency_key_replays_and_another_body_is_422(alice: Caller):
    headers = {"Idempotency-Key": "create-1"}
    first = await alice.call("POST", "/v1/jobs", json=cron_job(), headers=headers)
    again = await alice.call("POST", "/v1/jobs", json=cron_job(), headers=headers)
    assert first.status == again.status == 201
    assert await first.json() == await again.json() and again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["ETag"] == first.headers["ETag"]
    other = await alice.call("POST", "/v1/jobs", json=cron_job(name="other"), headers=headers)
    assert other.status == 422 and (await other.json())["field"] == "Idempotency-Key"
    assert len((await (await alice.call("GET", "/v1/jobs")).json())["items"]) == 1


async def test_listing_pages_with_cursors_and_filters(alice: Caller):
    for n in range(7):
        labels = {"team": "ops" if n % 2 else "web"}
        assert (await alice.call("POST", "/v1/jobs", json=cron_job(labels=labels))).status == 201
    seen, cursor, pages = [], None, 0
    while True:
        page = await (await alice.call("GET", "/v1/jobs?limit=3" + (f"&cursor={cursor}" if cursor else ""))).json()
        pages += 1
        seen += [j["id"] for j in page["items"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert pages == 3 and len(seen) == len(set(seen)) == 7
    ops = await (await alice.call("GET", "/v1/jobs?label=team%3Dops&limit=500")).json()
    assert len(ops["items"]) == 3 and "next_cursor" not in ops
    forged = await alice.call("GET", "/v1/jobs?limit=3&cursor=AAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    assert forged.status == 422 and (await forged.json())["field"] == "cursor"


async def test_preview_lists_fires_with_local_times_and_dst_flags(alice: Caller):
    schedule = {"type": "cron", "expr": "30 2 * * *", "tz": "Europe/Paris", "startAt": "2027-03-01T00:00:00Z"}
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job(schedule=schedule))).json()
    preview = await (await alice.call("GET", f"/v1/jobs/{job['id']}/preview?count=100")).json()
    fires = preview["fires"]
    assert len(fires) == 100 and fires[0]["at"] == job["next_run_at"]
    assert any(f["dst"] == "shifted" for f in fires)  # 02:30 does not exist on the spring-forward night
    assert all(f["local"].endswith(("+01:00", "+02:00")) for f in fires)
    assert (await alice.call("GET", f"/v1/jobs/{job['id']}/preview?count=0")).status == 422
    assert (await alice.call("GET", f"/v1/jobs/{job['id']}/preview?count=101")).status == 422


async def test_a_preview_is_charged_by_its_size_against_the_request_rate(make_client: Any, make_tenant: Any):
    # The API's clock stays in one second until the test moves it: slow calls on a loaded box must not spread
    # the requests over several seconds' quotas.
    now = [datetime.now(UTC).replace(microsecond=500_000)]
    tenant = await make_tenant(await make_client(clock=lambda: now[0], requests_per_s=60))
    job = await (await tenant.call("POST", "/v1/jobs", json=cron_job())).json()
    statuses = [(await tenant.call("GET", f"/v1/jobs/{job['id']}/preview?count=100")).status for _ in range(5)]
    assert statuses == [200, 429, 429, 429, 429]  # 51 units each (with the request): two never fit in one second
    now[0] += timedelta(seconds=1)  # the next second's quota
    assert (await tenant.call("GET", f"/v1/jobs/{job['id']}/preview?count=2")).status == 200


async def test_an_idempotent_delete_replays_its_204(alice: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    headers = {"Idempotency-Key": "delete-1"}
    first = await alice.call("DELETE", f"/v1/jobs/{job['id']}", headers=headers)
    again = await alice.call("DELETE", f"/v1/jobs/{job['id']}", headers=headers)
    assert first.status == again.status == 204 and again.headers["Idempotent-Replayed"] == "true"


async def test_get_reports_the_last_run_once_its_time_has_come(alice: Caller, store: CassandraStore):
    run_at = datetime.now(UTC) - timedelta(seconds=5)
    job = await (await alice.call("POST", "/v1/jobs", json=once_job(run_at))).json()
    assert "last_run" not in await (await alice.call("GET", f"/v1/jobs/{job['id']}")).json()
    now = datetime.now(UTC)
    run = await existing_run(store, uuid.UUID(job["next_run_id"]))
    claimed = await runs.claim(store, run, 0, "w1", now + timedelta(seconds=30), now)
    assert claimed.applied
    shown = await (await alice.call("GET", f"/v1/jobs/{job['id']}")).json()
    assert {k: shown["last_run"][k] for k in ("id", "status", "attempt")} == {
        "id": job["next_run_id"],
        "status": "RUNNING",
        "attempt": 1,
    }


async def test_a_once_job_whose_run_finished_has_no_next_run(alice: Caller, store: CassandraStore):
    run_at = datetime.now(UTC) - timedelta(seconds=5)
    job = await (await alice.call("POST", "/v1/jobs", json=once_job(run_at))).json()
    assert job["next_run_at"] is not None
    # The run is claimed and its outcome recorded, as the worker does.
    run = await existing_run(store, uuid.UUID(job["next_run_id"]))
    now = datetime.now(UTC)
    assert (await runs.claim(store, run, 0, "w1", now + timedelta(seconds=30), now)).applied
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.SUCCEEDED), "w1", now, now)
    shown = await (await alice.call("GET", f"/v1/jobs/{job['id']}")).json()
    listed = await (await alice.call("GET", "/v1/jobs")).json()
    assert shown["next_run_at"] is None
    assert [j["next_run_at"] for j in listed["items"] if j["id"] == job["id"]] == [None]


async def test_catch_up_skip_and_overlap_buffer_one_are_accepted_and_kept(alice: Caller):
    schedule = {"type": "cron", "expr": "*/5 * * * *", "tz": "UTC", "catchUp": "skip", "overlap": "buffer_one"}
    response = await alice.call("POST", "/v1/jobs", json=cron_job(schedule=schedule))
    assert response.status == 201, await response.text()
    job = await response.json()
    assert job["schedule"]["catchUp"] == "skip" and job["schedule"]["overlap"] == "buffer_one"
    refused = await alice.call("POST", "/v1/jobs", json=cron_job(schedule={**schedule, "overlap": "queue_all"}))
    assert refused.status == 422
