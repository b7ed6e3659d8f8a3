"""Asynchronous completion through the API on the real servers: a job opts in with `asyncCompletion`; its
target reports the outcome of the attempt it was called with (the fencing token); heartbeats never shorten a
live lease and never pass the job's maximum lease."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from schemas.messages import decode_report
from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller
from tickwheel.core.ids import minute_bucket
from tickwheel.core.targets import default_topic_prefix
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore

ASYNC = {"asyncCompletion": {"leaseS": 600, "maxLeaseS": 1800}}


async def running_run(caller: Caller, store: CassandraStore, **fields: object) -> tuple[dict, runs.NewRun]:
    """A job made through the API and its next run claimed by a worker (attempt 1, a lease of 60 s)."""
    made = await caller.call("POST", "/v1/jobs", json=cron_job(**fields))
    assert made.status == 201, await made.text()
    job = await made.json()
    now = datetime.now(UTC)
    scheduled = await runs.get_run(store, uuid.UUID(job["next_run_id"]))
    assert scheduled is not None
    run = scheduled.identity()
    assert (await runs.claim(store, run, 0, "w1", now + timedelta(seconds=60), now)).applied
    return job, run


async def test_a_job_opts_in_with_its_leases_and_bad_leases_are_refused_naming_the_field(alice: Caller) -> None:
    made = await alice.call("POST", "/v1/jobs", json=cron_job(**ASYNC))
    assert made.status == 201 and (await made.json())["asyncCompletion"] == {"leaseS": 600, "maxLeaseS": 1800}
    for fields, field in (
        ({"asyncCompletion": {"leaseS": 900, "maxLeaseS": 600}}, "asyncCompletion.leaseS"),
        ({"asyncCompletion": {"maxLeaseS": 10**7}}, "asyncCompletion.maxLeaseS"),
        ({"asyncCompletion": {"leaseS": "long"}}, "asyncCompletion.leaseS"),
        ({"asyncCompletion": {"lease": 5}}, "asyncCompletion.lease"),
        (
            {**ASYNC, "target": {"type": "kafka", "topic": f"{default_topic_prefix(alice.tenant_id)}events"}},
            "asyncCompletion",
        ),
    ):
        refused = await alice.call("POST", "/v1/jobs", json=cron_job(**fields))
        assert refused.status == 422, (fields, await refused.text())
        assert refused.content_type == "application/problem+json" and (await refused.json())["field"] == field


async def test_the_holding_attempt_reports_once_and_a_worker_is_told_at_once(alice: Caller, store: CassandraStore):
    _, run = await running_run(alice, store, **ASYNC)
    path = f"/v1/runs/{run.run_id}/complete"
    stale = await alice.call("POST", path, json={"attempt": 2, "outcome": "succeeded"})
    assert stale.status == 409 and (await stale.json())["field"] == "attempt"
    assert not await runs.lease_lapsed(store, run.run_id, 1, datetime.now(UTC)), "a live lease, nothing reported"
    reported = datetime.now(UTC)
    done = await alice.call("POST", path, json={"attempt": 1, "outcome": "failed", "detail": "disk full"})
    assert done.status == 202
    assert await done.json() == {"id": str(run.run_id), "attempt": 1, "outcome": "failed", "status": "RUNNING"}
    row = await runs.get_run(store, run.run_id)
    assert row is not None and row.status == "RUNNING"
    report = decode_report(row.report(1) or "")
    assert (report.outcome, report.detail) == ("failed", "disk full") and report.reported_at_ms > 0
    again = await alice.call("POST", path, json={"attempt": 1, "outcome": "succeeded"})
    assert again.status == 409, "a second report of one attempt must not replace the first"
    checks = []  # the report's minute, and the next if the minute turned meanwhile
    for minute in sorted({minute_bucket(reported), minute_bucket(datetime.now(UTC))}):
        checks += await store.execute(
            "SELECT fire_at, attempt, kind FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
            [minute.replace(tzinfo=None), run.shard],
        )
    assert any(c["kind"] == "lease_check" and c["attempt"] == 1 for c in checks), "no lease check fires the report"
    assert await runs.lease_lapsed(store, run.run_id, 1, datetime.now(UTC)), "the dispatcher would drop the check"


async def test_completion_is_refused_for_a_job_that_did_not_opt_in_and_for_another_tenant(
    alice: Caller, bob: Caller, store: CassandraStore
) -> None:
    _, plain = await running_run(alice, store)
    refused = await alice.call("POST", f"/v1/runs/{plain.run_id}/complete", json={"attempt": 1, "outcome": "succeeded"})
    assert refused.status == 409
    _, opted = await running_run(alice, store, **ASYNC)
    other = await bob.call("POST", f"/v1/runs/{opted.run_id}/complete", json={"attempt": 1, "outcome": "succeeded"})
    assert other.status == 404
    row = await runs.get_run(store, opted.run_id)
    assert row is not None and row.report(1) is None


async def test_a_completion_body_is_checked_field_by_field(alice: Caller, store: CassandraStore) -> None:
    _, run = await running_run(alice, store, **ASYNC)
    path = f"/v1/runs/{run.run_id}/complete"
    for body, field in (
        ({"outcome": "succeeded"}, "attempt"),
        ({"attempt": 0, "outcome": "succeeded"}, "attempt"),
        ({"attempt": 2**31, "outcome": "succeeded"}, "attempt"),
        ({"attempt": 1, "outcome": "done"}, "outcome"),
        ({"attempt": 1, "outcome": "failed", "detail": "x" * 3000}, "detail"),
        ({"attempt": 1, "outcome": "failed", "extra": 1}, "extra"),
    ):
        refused = await alice.call("POST", path, json=body)
        assert refused.status == 422 and (await refused.json())["field"] == field, body
    assert (await alice.call("POST", path, data=b"{", headers={"Content-Type": "application/json"})).status == 400


async def test_a_replayed_idempotency_key_answers_the_first_report(alice: Caller, store: CassandraStore) -> None:
    _, run = await running_run(alice, store, **ASYNC)
    path, key = f"/v1/runs/{run.run_id}/complete", {"Idempotency-Key": uuid.uuid4().hex}
    first = await alice.call("POST", path, json={"attempt": 1, "outcome": "succeeded"}, headers=key)
    replay = await alice.call("POST", path, json={"attempt": 1, "outcome": "succeeded"}, headers=key)
    assert (first.status, replay.status) == (202, 202) and await first.json() == await replay.json()


async def test_a_heartbeat_never_shortens_a_live_lease_and_never_passes_the_maximum(
    alice: Caller, store: CassandraStore
) -> None:
    _, run = await running_run(alice, store, **ASYNC)
    beat = f"/v1/runs/{run.run_id}/heartbeat"
    longer = await (await alice.call("POST", beat, json={"attempt": 1, "extendByS": 1200})).json()
    shorter = await alice.call("POST", beat, json={"attempt": 1, "extendByS": 5})
    assert shorter.status == 200 and (await shorter.json())["lease_until"] == longer["lease_until"]
    row = await runs.get_run(store, run.run_id)
    assert row is not None and row.lease_until == datetime.fromisoformat(longer["lease_until"])
    default = await (await alice.call("POST", beat, json={"attempt": 1})).json()
    assert default["lease_until"] == longer["lease_until"], "leaseS (600 s) is shorter than the live lease"
    capped = await (await alice.call("POST", beat, json={"attempt": 1, "extendByS": 3600})).json()
    assert row.started_at is not None
    latest = row.started_at + timedelta(seconds=1800)
    assert abs((datetime.fromisoformat(capped["lease_until"]) - latest).total_seconds()) < 0.01


async def test_a_heartbeat_of_a_job_without_async_completion_also_keeps_the_longer_lease(
    alice: Caller, store: CassandraStore
) -> None:
    _, run = await running_run(alice, store)
    beat = f"/v1/runs/{run.run_id}/heartbeat"
    long = await (await alice.call("POST", beat, json={"attempt": 1, "extendByS": 900})).json()
    short = await (await alice.call("POST", beat, json={"attempt": 1, "extendByS": 1})).json()
    assert short["lease_until"] == long["lease_until"]
