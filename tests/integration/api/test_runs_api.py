"""Runs, heartbeats and dead letters through the API; runs are moved by the real run state machine."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from tests.integration.api.api_bodies import cron_job, once_job
from tests.integration.api.conftest import Caller, existing_run
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.dead_letters import add_dead_letter


async def running_run(alice: Caller, store: CassandraStore) -> tuple[dict, runs.NewRun]:
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    now = datetime.now(UTC)
    run = await existing_run(store, uuid.UUID(job["next_run_id"]))
    claimed = await runs.claim(store, run, 0, "w1", now + timedelta(seconds=60), now)
    assert claimed.applied
    return job, run


async def test_a_run_shows_its_attempts_and_heartbeats_extend_only_the_holding_attempt(
    alice: Caller, store: CassandraStore
):
    job, _ = await running_run(alice, store)
    run_path = f"/v1/runs/{job['next_run_id']}"
    run = await (await alice.call("GET", run_path)).json()
    assert run["status"] == "RUNNING" and run["attempt"] == 1 and run["job_id"] == job["id"]
    beat = await alice.call("POST", f"{run_path}/heartbeat", json={"attempt": 1, "extendByS": 600})
    assert beat.status == 200
    lease_until = datetime.fromisoformat((await beat.json())["lease_until"])
    assert lease_until > datetime.now(UTC) + timedelta(seconds=500)
    stale = await alice.call("POST", f"{run_path}/heartbeat", json={"attempt": 0})
    assert stale.status == 422
    stale = await alice.call("POST", f"{run_path}/heartbeat", json={"attempt": 2})
    assert stale.status == 409 and (await stale.json())["field"] == "attempt"
    bad = await alice.call("POST", f"{run_path}/heartbeat", json={"attempt": 1, "extendByS": 10**9})
    assert bad.status == 422


async def test_dead_letters_list_filter_and_redrive_a_new_attempt_of_the_same_run(alice: Caller, store: CassandraStore):
    job, run = await running_run(alice, store)
    now = datetime.now(UTC)
    result = runs.AttemptResult(runs.RunStatus.DEAD, response_code=500, error="HTTP 500")
    assert await runs.finish(store, run, 1, result, "w1", now, now)
    await add_dead_letter(
        store, tenant_id=alice.tenant_id, run_id=run.run_id, job_id=run.job_id, target_host="example.com",
        payload=b"{}", last_error="HTTP 500", attempts=[{"attempt": 1, "code": 500}], dead_at=now, ttl_s=86400,
    )  # fmt: skip
    letters = await (await alice.call("GET", "/v1/dead-letters?target_host=example.com")).json()
    assert [d["run_id"] for d in letters["items"]] == [str(run.run_id)]
    spelled = await (await alice.call("GET", "/v1/dead-letters?target_host=EXAMPLE.com.")).json()
    assert spelled["items"] == letters["items"]
    none = await (await alice.call("GET", "/v1/dead-letters?target_host=other.org")).json()
    assert none["items"] == []
    dry = await (await alice.call("POST", "/v1/dead-letters/redrive", json={"dryRun": True})).json()
    assert dry == {"dry_run": True, "matched": 1, "run_ids": [str(run.run_id)]}
    redriven = await alice.call("POST", f"/v1/dead-letters/{run.run_id}/redrive")
    assert redriven.status == 202
    row = await runs.get_run(store, run.run_id)
    assert row is not None and row.status == "RETRY" and row.attempt == 1 and row.redrive_count == 1
    assert (await alice.call("POST", f"/v1/dead-letters/{run.run_id}/redrive")).status == 404
    shown = await (await alice.call("GET", f"/v1/runs/{run.run_id}")).json()
    assert [a["kind"] for a in shown["attempts"]].count("redrive") == 1
    history = await (await alice.call("GET", f"/v1/jobs/{job['id']}/runs?status=RETRY")).json()
    assert [r["id"] for r in history["items"]] == [str(run.run_id)]


async def test_redrive_runs_for_the_current_job_version_and_refuses_a_paused_job(alice: Caller, store: CassandraStore):
    job, run = await running_run(alice, store)
    now = datetime.now(UTC)
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.DEAD, error="HTTP 404"), "w1", now, now)
    await add_dead_letter(
        store, tenant_id=alice.tenant_id, run_id=run.run_id, job_id=run.job_id, target_host="example.com",
        payload=b"{}", last_error="HTTP 404", attempts=[], dead_at=now, ttl_s=86400,
    )  # fmt: skip
    path = f"/v1/jobs/{job['id']}"
    assert (await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": "1"})).status == 200
    assert (await alice.call("POST", f"/v1/dead-letters/{run.run_id}/redrive")).status == 409
    bulk = await (await alice.call("POST", "/v1/dead-letters/redrive", json={"jobId": job["id"]})).json()
    assert bulk["matched"] == 1 and bulk["redriven"] == 0
    assert (await alice.call("PATCH", path, json={"state": "ACTIVE"}, headers={"If-Match": "2"})).status == 200
    bulk = await (await alice.call("POST", "/v1/dead-letters/redrive", json={"jobId": job["id"]})).json()
    assert bulk["run_ids"] == [str(run.run_id)]
    row = await runs.get_run(store, run.run_id)
    assert row is not None and row.status == "RETRY" and row.job_version == 3


async def test_a_claim_refused_after_the_outcome_never_hides_it_in_the_history(
    alice: Caller, store: CassandraStore
) -> None:
    body = once_job(datetime.now(UTC) - timedelta(seconds=5))  # made after its occurrence, claimed after it
    job = await (await alice.call("POST", "/v1/jobs", json=body)).json()
    run = await existing_run(store, uuid.UUID(job["next_run_id"]))
    now = datetime.now(UTC)
    assert (await runs.claim(store, run, 0, "w1", now + timedelta(seconds=60), now)).applied
    listed = await (await alice.call("GET", f"/v1/jobs/{job['id']}/runs")).json()
    assert [(r["status"], r["attempt"]) for r in listed["items"]] == [("RUNNING", 1)]
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.SUCCEEDED), "w1", now, datetime.now(UTC))
    late = datetime.now(UTC) + timedelta(seconds=1)  # a duplicate fire, claimed after the outcome: refused
    assert not (await runs.claim(store, run, 0, "w2", late + timedelta(seconds=60), late)).applied
    listed = await (await alice.call("GET", f"/v1/jobs/{job['id']}/runs")).json()
    assert [(r["status"], r["attempt"]) for r in listed["items"]] == [("SUCCEEDED", 1)]
