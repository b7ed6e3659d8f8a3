"""Issue 17 through the HTTP API on the real servers: payload templates, trigger now, named jobs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.store.cassandra import CassandraStore


async def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"].startswith("application/problem+json")
    body: dict[str, Any] = await response.json()
    return body


async def test_a_templated_payload_is_stored_and_a_template_that_does_not_parse_is_a_422_naming_its_path(
    alice: Caller,
):
    templated = cron_job(payload={"day": "{{scheduled_at_local}}", "n": 1}, payloadTemplate=True)
    created = await alice.call("POST", "/v1/jobs", json=templated)
    assert created.status == 201, await created.text()
    job = await created.json()
    assert job["payloadTemplate"] is True and job["payload"] == {"day": "{{scheduled_at_local}}", "n": 1}
    bad = cron_job(payload={"a": {"b": ["{{scheduled_at}", "x"]}}, payloadTemplate=True)
    assert (await problem(await alice.call("POST", "/v1/jobs", json=bad), 422))["field"] == "payload.a.b[0]"
    unknown = cron_job(payload={"env": "{{secret_key}}"}, payloadTemplate=True)
    assert (await problem(await alice.call("POST", "/v1/jobs", json=unknown), 422))["field"] == "payload.env"
    base64 = cron_job(payload=None, payloadBase64="e30=", payloadTemplate=True)
    assert (await problem(await alice.call("POST", "/v1/jobs", json=base64), 422))["field"] == "payloadTemplate"
    # not opted in: braces are plain text
    plain = await alice.call("POST", "/v1/jobs", json=cron_job(payload={"env": "{{secret_key}}"}))
    assert plain.status == 201


async def test_trigger_makes_one_extra_run_now_shown_as_triggered_and_leaves_the_schedule_alone(
    alice: Caller, store: CassandraStore
):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    before = datetime.now(UTC)
    answer = await alice.call("POST", f"/v1/jobs/{job['id']}/trigger", headers={"Idempotency-Key": "t-1"})
    assert answer.status == 201, await answer.text()
    run = await answer.json()
    assert run["origin"] == "trigger" and run["forced"] is False and run["status"] == "SCHEDULED"
    scheduled_at = datetime.fromisoformat(run["scheduled_at"])
    assert before - timedelta(seconds=1) <= scheduled_at <= datetime.now(UTC)
    assert uuid.UUID(run["id"]) != run_id_for(uuid.UUID(job["id"]), scheduled_at)
    replay = await alice.call("POST", f"/v1/jobs/{job['id']}/trigger", headers={"Idempotency-Key": "t-1"})
    assert replay.headers["Idempotent-Replayed"] == "true" and (await replay.json())["id"] == run["id"]
    row = (await store.execute("SELECT * FROM runs WHERE run_id = ?", [uuid.UUID(run["id"])]))[0]
    assert (row["origin"], row["status"], row["attempt"]) == ("trigger", "SCHEDULED", 0)
    bucket = scheduled_at.replace(second=0, microsecond=0)
    rows = await store.execute(
        "SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?", [bucket, shard_of(uuid.UUID(job["id"]))]
    )
    assert uuid.UUID(run["id"]) in [r["run_id"] for r in rows]
    history = await (await alice.call("GET", f"/v1/jobs/{job['id']}/runs")).json()
    assert {(r["id"], r["origin"]) for r in history["items"]} == {
        (run["id"], "trigger"), (job["next_run_id"], "schedule"),
    }  # fmt: skip
    assert (await (await alice.call("GET", f"/v1/runs/{run['id']}")).json())["origin"] == "trigger"
    after = await (await alice.call("GET", f"/v1/jobs/{job['id']}")).json()
    assert (after["next_run_id"], after["version"]) == (job["next_run_id"], job["version"])


async def test_trigger_at_a_later_instant_and_its_validation(alice: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}/trigger"
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    later = await alice.call("POST", path, json={"at": at.isoformat()})
    assert later.status == 201 and datetime.fromisoformat((await later.json())["scheduled_at"]) == at
    cases: list[tuple[Any, str | None]] = [
        ({"at": "tomorrow"}, "at"),
        ({"at": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}, "at"),
        ({"at": (datetime.now(UTC) + timedelta(days=8)).isoformat()}, "at"),
        ({"force": "yes"}, "force"),
        ({"when": "now"}, "when"),
        ([1], None),
    ]
    for body, field in cases:
        found = await problem(await alice.call("POST", path, json=body), 422)
        assert found.get("field") == field, (body, found)
    assert (await alice.call("POST", path, data=b"{not json")).status == 400


async def test_a_paused_job_is_triggered_only_with_force_and_a_deleted_one_never(alice: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    paused = await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": '"1"'})
    assert paused.status == 200
    assert (await problem(await alice.call("POST", f"{path}/trigger"), 409))["field"] == "force"
    forced = await alice.call("POST", f"{path}/trigger", json={"force": True})
    assert forced.status == 201 and (await forced.json())["forced"] is True
    assert (await alice.call("DELETE", path)).status == 204
    await problem(await alice.call("POST", f"{path}/trigger", json={"force": True}), 409)


async def test_another_tenants_job_cannot_be_triggered(alice: Caller, bob: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    await problem(await bob.call("POST", f"/v1/jobs/{job['id']}/trigger"), 404)
    await problem(await bob.call("POST", f"/v1/jobs/{uuid.uuid4()}/trigger"), 404)
