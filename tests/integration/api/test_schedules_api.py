"""Issue 17 through the HTTP API on the real servers: payload templates, trigger now, named jobs."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller, problem_of
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.store.cassandra import CassandraStore


async def test_a_templated_payload_is_stored_and_a_template_that_does_not_parse_is_a_422_naming_its_path(
    alice: Caller,
):
    templated = cron_job(payload={"day": "{{scheduled_at_local}}", "n": 1}, payloadTemplate=True)
    created = await alice.call("POST", "/v1/jobs", json=templated)
    assert created.status == 201, await created.text()
    job = await created.json()
    assert job["payloadTemplate"] is True and job["payload"] == {"day": "{{scheduled_at_local}}", "n": 1}
    bad = cron_job(payload={"a": {"b": ["{{scheduled_at}", "x"]}}, payloadTemplate=True)
    assert (await problem_of(await alice.call("POST", "/v1/jobs", json=bad), 422))["field"] == "payload.a.b[0]"
    unknown = cron_job(payload={"env": "{{secret_key}}"}, payloadTemplate=True)
    assert (await problem_of(await alice.call("POST", "/v1/jobs", json=unknown), 422))["field"] == "payload.env"
    base64 = cron_job(payload=None, payloadBase64="e30=", payloadTemplate=True)
    assert (await problem_of(await alice.call("POST", "/v1/jobs", json=base64), 422))["field"] == "payloadTemplate"
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
    changes = (await (await alice.call("GET", f"/v1/jobs/{job['id']}/history")).json())["items"]
    assert [(c["action"], c["detail"].get("run_id")) for c in changes] == [("trigger", run["id"]), ("create", None)]


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
        found = await problem_of(await alice.call("POST", path, json=body), 422)
        assert found.get("field") == field, (body, found)
    assert (await alice.call("POST", path, data=b"{not json")).status == 400


async def test_a_paused_job_is_triggered_only_with_force_and_a_deleted_one_never(alice: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    paused = await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": '"1"'})
    assert paused.status == 200
    assert (await problem_of(await alice.call("POST", f"{path}/trigger"), 409))["field"] == "force"
    forced = await alice.call("POST", f"{path}/trigger", json={"force": True})
    assert forced.status == 201 and (await forced.json())["forced"] is True
    assert (await alice.call("DELETE", path)).status == 204
    await problem_of(await alice.call("POST", f"{path}/trigger", json={"force": True}), 409)


async def test_another_tenants_job_cannot_be_triggered(alice: Caller, bob: Caller):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    await problem_of(await bob.call("POST", f"/v1/jobs/{job['id']}/trigger"), 404)
    await problem_of(await bob.call("POST", f"/v1/jobs/{uuid.uuid4()}/trigger"), 404)


async def test_put_by_name_creates_then_replaces_the_same_job_and_the_same_body_changes_nothing(alice: Caller):
    path = "/v1/jobs/by-name/nightly-report"
    created = await alice.call("PUT", path, json=cron_job(name=None))
    assert created.status == 201, await created.text()
    job = await created.json()
    assert job["name"] == "nightly-report" and created.headers["Location"] == f"/v1/jobs/{job['id']}"
    got = await alice.call("GET", path)
    assert got.status == 200 and (await got.json())["id"] == job["id"] and got.headers["ETag"] == '"1"'
    again = await alice.call("PUT", path, json=cron_job(name="nightly-report"))
    assert again.status == 200 and (await again.json())["version"] == 1
    edited = await alice.call("PUT", path, json=cron_job(name=None, schedule={"type": "cron", "expr": "0 10 * * *"}))
    document = await edited.json()
    assert edited.status == 200 and (document["id"], document["version"]) == (job["id"], 2)
    assert document["schedule"]["expr"] == "0 10 * * *" and document["next_run_id"] != job["next_run_id"]
    hourly = cron_job(name=None, schedule={"type": "interval", "everyS": 3600})
    first = await (await alice.call("PUT", "/v1/jobs/by-name/hourly", json=hourly)).json()
    second = await (await alice.call("PUT", "/v1/jobs/by-name/hourly", json=hourly)).json()
    assert (second["version"], second["schedule"]["anchorAt"]) == (1, first["schedule"]["anchorAt"])


async def test_put_by_name_conditions_and_validation(alice: Caller):
    path = "/v1/jobs/by-name/sync.orders_v2~eu"
    await problem_of(await alice.call("PUT", path, json=cron_job(name=None), headers={"If-Match": '"1"'}), 412)
    assert (await alice.call("PUT", path, json=cron_job(name=None))).status == 201
    await problem_of(await alice.call("PUT", path, json=cron_job(name=None), headers={"If-None-Match": "*"}), 412)
    await problem_of(await alice.call("PUT", path, json=cron_job(name=None), headers={"If-Match": '"7"'}), 412)
    changed = cron_job(name=None, labels={"team": "data"})
    assert (await alice.call("PUT", path, json=changed, headers={"If-Match": '"1"'})).status == 200
    assert (await problem_of(await alice.call("PUT", path, json=cron_job(name="other")), 422))["field"] == "name"
    assert (await problem_of(await alice.call("PUT", "/v1/jobs/by-name/-x", json=cron_job()), 422))["field"] == "name"
    bad = cron_job(name=None, schedule={"type": "cron", "expr": "61 * * * *"})
    assert (await problem_of(await alice.call("PUT", path, json=bad), 422))["field"] == "schedule.expr"
    await problem_of(await alice.call("GET", "/v1/jobs/by-name/never-made"), 404)
    keyed = {"Idempotency-Key": "put-1"}
    assert (await alice.call("PUT", path, json=changed, headers=keyed)).status == 200
    odd = {**keyed, "If-None-Match": "AAA"}  # the same key and body again: a replay, but only of a valid request
    assert (await problem_of(await alice.call("PUT", path, json=changed, headers=odd), 422))["field"] == "If-None-Match"


async def test_patch_and_delete_by_name_and_a_deleted_name_can_be_created_again(alice: Caller):
    path = "/v1/jobs/by-name/cleanup"
    job = await (await alice.call("PUT", path, json=cron_job(name=None))).json()
    paused = await alice.call("PATCH", path, json={"state": "PAUSED"}, headers={"If-Match": '"1"'})
    assert paused.status == 200 and (await paused.json())["state"] == "PAUSED"
    renamed = await alice.call("PATCH", path, json={"name": "other"}, headers={"If-Match": '"2"'})
    assert (await problem_of(renamed, 422))["field"] == "name"
    kept = await alice.call("PUT", path, json=cron_job(name=None, payload={"report": "weekly"}))
    assert (await kept.json())["state"] == "PAUSED"  # a replace keeps the state
    assert (await alice.call("DELETE", path, headers={"Idempotency-Key": "del-1"})).status == 204
    assert (await alice.call("GET", path)).status == 404
    again = await alice.call("PUT", path, json=cron_job(name=None))
    assert again.status == 201 and (await again.json())["id"] != job["id"]


async def test_names_belong_to_one_tenant(alice: Caller, bob: Caller):
    path = "/v1/jobs/by-name/shared-name"
    mine = await (await alice.call("PUT", path, json=cron_job(name=None))).json()
    for method, body, headers in [("GET", None, {}), ("PATCH", {"state": "PAUSED"}, {"If-Match": '"1"'}),
                                  ("DELETE", None, {})]:  # fmt: skip
        await problem_of(await bob.call(method, path, json=body, headers=headers), 404)
    theirs = await bob.call("PUT", path, json=cron_job(name=None))
    assert theirs.status == 201 and (await theirs.json())["id"] != mine["id"]
    assert (await (await alice.call("GET", path)).json())["id"] == mine["id"]


async def test_racing_puts_of_a_new_name_make_one_job_and_a_put_is_idempotent_under_its_key(alice: Caller):
    path = "/v1/jobs/by-name/raced"
    answers = await asyncio.gather(*(alice.call("PUT", path, json=cron_job(name=None)) for _ in range(6)))
    statuses = sorted(a.status for a in answers)
    assert statuses.count(201) == 1 and set(statuses) <= {200, 201, 409}, statuses
    listed = await (await alice.call("GET", "/v1/jobs")).json()
    assert [j["name"] for j in listed["items"]] == ["raced"]
    key = {"Idempotency-Key": "put-1"}
    first = await alice.call("PUT", "/v1/jobs/by-name/keyed", json=cron_job(name=None), headers=key)
    replay = await alice.call("PUT", "/v1/jobs/by-name/keyed", json=cron_job(name=None), headers=key)
    assert (first.status, replay.status, replay.headers["Idempotent-Replayed"]) == (201, 201, "true")


def at_of(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def test_skip_the_next_occurrences_or_a_given_one_moves_the_next_run_and_keeps_the_expression(
    alice: Caller, store: CassandraStore
):
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    path = f"/v1/jobs/{job['id']}"
    upcoming = [f["at"] for f in (await (await alice.call("GET", f"{path}/preview?count=5")).json())["fires"]]
    answer = await alice.call("POST", f"{path}/skip", json={"count": 2}, headers={"Idempotency-Key": "s-1"})
    assert answer.status == 200, await answer.text()
    skipped = await answer.json()
    assert [at_of(t) for t in skipped["schedule"]["skip"]] == [at_of(t) for t in upcoming[:2]]
    assert skipped["schedule"]["expr"] == "0 9 * * *" and skipped["version"] == 2
    assert at_of(skipped["next_run_at"]) == at_of(upcoming[2])
    old = (await store.execute("SELECT status FROM runs WHERE run_id = ?", [uuid.UUID(job["next_run_id"])]))[0]
    assert old["status"] == "CANCELLED"
    one = await (await alice.call("POST", f"{path}/skip", json={"occurrence": upcoming[3]})).json()
    assert len(one["schedule"]["skip"]) == 3 and at_of(one["next_run_at"]) == at_of(upcoming[2])
    preview = await (await alice.call("GET", f"{path}/preview?count=3")).json()
    assert [at_of(f["at"]) for f in preview["fires"]] == [at_of(upcoming[2]), at_of(upcoming[4]),
                                                         at_of(preview["fires"][2]["at"])]  # fmt: skip
    assert {(at_of(e["at"]), e["reason"]) for e in preview["excluded"]} >= {
        (at_of(upcoming[3]), "skipped"),
    }  # fmt: skip
    for body, field in [({}, "count"), ({"count": 0}, "count"), ({"count": 2, "occurrence": upcoming[4]}, "count"),
                        ({"occurrence": "2030-01-01T09:17:00Z"}, "occurrence"), ({"cnt": 1}, "cnt")]:  # fmt: skip
        assert (await problem_of(await alice.call("POST", f"{path}/skip", json=body), 422)).get("field") == field
    await problem_of(await alice.call("POST", f"{path}/skip", json={"count": 1}, headers={"If-Match": '"1"'}), 412)


async def test_pause_until_moves_the_next_run_past_the_pause_and_catch_up_all_runs_the_missed_ones_then(
    alice: Caller, store: CassandraStore
):
    hourly = cron_job(name=None, schedule={"type": "cron", "expr": "0 * * * *", "tz": "UTC"})
    job = await (await alice.call("POST", "/v1/jobs", json=hourly)).json()
    until = (datetime.now(UTC) + timedelta(hours=5)).replace(minute=30, second=0, microsecond=0)
    paused = await alice.call("POST", f"/v1/jobs/{job['id']}/pause", json={"until": until.isoformat()})
    assert paused.status == 200, await paused.text()
    document = await paused.json()
    assert document["state"] == "ACTIVE" and at_of(document["schedule"]["pausedUntil"]) == until
    assert at_of(document["next_run_at"]) == until.replace(minute=0) + timedelta(hours=1)
    everything = cron_job(name=None, schedule={"type": "cron", "expr": "0 * * * *", "tz": "UTC", "catchUp": "all"})
    caught = await (await alice.call("POST", "/v1/jobs", json=everything)).json()
    await alice.call("POST", f"/v1/jobs/{caught['id']}/pause", json={"until": until.isoformat()})
    rows = await store.execute("SELECT run_id, scheduled_at, status FROM runs_by_job WHERE job_id = ?",
                               [uuid.UUID(caught["id"])])  # fmt: skip
    missed = [r for r in rows if r["status"] == "SCHEDULED" and r["scheduled_at"] < until.replace(tzinfo=None)]
    assert len(missed) >= 4
    for row in missed:
        run = (await store.execute("SELECT due_at FROM runs WHERE run_id = ?", [row["run_id"]]))[0]
        assert run["due_at"] == until.replace(tzinfo=None)
    for body in [{}, {"until": "soon"}, {"until": (datetime.now(UTC) - timedelta(minutes=1)).isoformat()},
                 {"until": (datetime.now(UTC) + timedelta(days=400)).isoformat()}]:  # fmt: skip
        assert (await problem_of(await alice.call("POST", f"/v1/jobs/{job['id']}/pause", json=body), 422))["field"] == (
            "until"
        )
    stale = {"If-Match": "*"}  # the body is checked before the version: an invalid one is a 422 whatever If-Match says
    pause = await alice.call("POST", f"/v1/jobs/{job['id']}/pause", json={"until": ""}, headers=stale)
    assert (await problem_of(pause, 422))["field"] == "until"


async def test_skip_and_pause_refuse_once_and_deleted_jobs_and_other_tenants(alice: Caller, bob: Caller):
    once = {"schedule": {"type": "once", "runAt": (datetime.now(UTC) + timedelta(hours=1)).isoformat()},
            "target": {"type": "http", "url": "https://example.com/x"}}  # fmt: skip
    job = await (await alice.call("POST", "/v1/jobs", json=once)).json()
    until = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    await problem_of(await alice.call("POST", f"/v1/jobs/{job['id']}/skip", json={"count": 1}), 409)
    await problem_of(await alice.call("POST", f"/v1/jobs/{job['id']}/pause", json={"until": until}), 409)
    cron = await (await alice.call("POST", "/v1/jobs", json=cron_job())).json()
    await problem_of(await bob.call("POST", f"/v1/jobs/{cron['id']}/skip", json={"count": 1}), 404)
    await problem_of(await bob.call("POST", f"/v1/jobs/{cron['id']}/pause", json={"until": until}), 404)
    assert (await alice.call("DELETE", f"/v1/jobs/{cron['id']}")).status == 204
    await problem_of(await alice.call("POST", f"/v1/jobs/{cron['id']}/skip", json={"count": 1}), 409)


async def test_a_job_with_several_calendars_and_exclusions_previews_sources_and_exclusions(alice: Caller):
    schedule = {
        "type": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Paris",
        "calendars": [{"expr": "0 9 * * *"}, {"expr": "0 18 * * 5", "tz": "America/New_York"}],
        "exclude": {"dates": ["2026-12-24/2026-12-26", "2027-01-01"], "except": ["0 9 * * 3"]},
        "startAt": "2026-12-21T00:00:00Z", "endAt": "2027-01-31T00:00:00Z",
    }  # fmt: skip
    created = await alice.call("POST", "/v1/jobs", json=cron_job(schedule=schedule))
    assert created.status == 201, await created.text()
    job = await created.json()
    assert job["schedule"]["calendars"][1] == {"expr": "0 18 * * 5", "tz": "America/New_York"}
    preview = await (await alice.call("GET", f"/v1/jobs/{job['id']}/preview?count=8")).json()
    fires = [(f["local"][:16], f["expr"]) for f in preview["fires"]]
    assert fires[:4] == [
        ("2026-12-21T09:00", "0 9 * * 1-5"), ("2026-12-22T09:00", "0 9 * * 1-5"),
        ("2026-12-27T09:00", "0 9 * * *"), ("2026-12-28T09:00", "0 9 * * 1-5"),
    ]  # fmt: skip
    assert ("2026-12-26T00:00", "0 18 * * 5") not in fires  # Friday 18:00 New York is Saturday in Paris: excluded
    reasons = {(e["local"][:16], e["reason"]) for e in preview["excluded"]}
    assert ("2026-12-23T09:00", "except 0 9 * * 3") in reasons
    assert ("2026-12-24T09:00", "dates 2026-12-24..2026-12-26") in reasons
    bad: list[tuple[dict[str, Any], str]] = [
        ({"calendars": [{"expr": "0 9 * *"}]}, "schedule.calendars[0].expr"),
        ({"calendars": [{"expr": "* * * * * *"}]}, "schedule.calendars[0].expr"),
        ({"calendars": [{"expr": "0 9 * * *", "tz": "Mars/Base"}]}, "schedule.calendars[0].tz"),
        ({"exclude": {"dates": ["2026-13-01"]}}, "schedule.exclude.dates[0]"),
        ({"exclude": {"dates": ["2026-12-26/2026-12-24"]}}, "schedule.exclude.dates[0]"),
        ({"exclude": {"except": ["nope"]}}, "schedule.exclude.except[0]"),
        ({"exclude": {"tz": "Nowhere/City"}}, "schedule.exclude.tz"),
        ({"skip": ["yesterday"]}, "schedule.skip[0]"),
        ({"pausedUntil": "later"}, "schedule.pausedUntil"),
    ]
    for extra, field in bad:
        body = cron_job(schedule={"type": "cron", "expr": "0 9 * * *", **extra})
        assert (await problem_of(await alice.call("POST", "/v1/jobs", json=body), 422))["field"] == field, extra
    interval = cron_job(schedule={"type": "interval", "everyS": 3600, "calendars": [{"expr": "0 9 * * *"}]})
    assert (await problem_of(await alice.call("POST", "/v1/jobs", json=interval), 422))["field"] == "schedule.calendars"


async def test_backfill_makes_the_past_ranges_runs_now_with_their_own_ids_and_a_second_call_writes_nothing(
    alice: Caller, store: CassandraStore
):
    hourly = {"type": "cron", "expr": "0 * * * *", "exclude": {"except": ["30 8 * * *"], "tz": "Asia/Kolkata"}}
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job(schedule=hourly, delayToleranceS=60))).json()
    path = f"/v1/jobs/{job['id']}/backfill"
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    span = {"from": (end - timedelta(hours=24)).isoformat(), "to": end.isoformat()}
    dry = await alice.call("POST", path, json={**span, "dryRun": True})
    assert dry.status == 200, await dry.text()
    planned = await dry.json()
    every_hour = [end - timedelta(hours=h) for h in range(24, 0, -1)]
    instants = [at_of(r["scheduled_at"]) for r in planned["runs"]]
    assert instants == [at for at in every_hour if at.hour != 3]  # 08:30 in Kolkata is 03:00 UTC: excluded
    assert planned["count"] == 23
    fire_ats = [at_of(r["fire_at"]) for r in planned["runs"]]
    assert fire_ats[-1] - fire_ats[0] < timedelta(seconds=60) and fire_ats == sorted(fire_ats)
    unwritten = await store.execute("SELECT run_id FROM runs WHERE run_id = ?", [uuid.UUID(planned["runs"][0]["id"])])
    assert unwritten == []
    made = await alice.call("POST", path, json=span, headers={"Idempotency-Key": "b-1"})
    assert made.status == 201, await made.text()
    changes = (await (await alice.call("GET", f"/v1/jobs/{job['id']}/history")).json())["items"]
    assert [(c["action"], c["detail"].get("count")) for c in changes] == [("backfill", 23), ("create", None)]
    runs = (await made.json())["runs"]
    assert [r["id"] for r in runs] == [r["id"] for r in planned["runs"]]
    first = uuid.UUID(runs[0]["id"])
    assert first != run_id_for(uuid.UUID(job["id"]), instants[0])
    row = (await store.execute("SELECT origin, status, scheduled_at, due_at FROM runs WHERE run_id = ?", [first]))[0]
    assert (row["origin"], row["status"]) == ("backfill", "SCHEDULED")
    assert row["scheduled_at"] == instants[0].replace(tzinfo=None) and row["due_at"] > row["scheduled_at"]
    history = await (await alice.call("GET", f"/v1/jobs/{job['id']}/runs?limit=100")).json()
    assert sum(1 for r in history["items"] if r["origin"] == "backfill") == 23
    again = await alice.call("POST", path, json=span)
    assert again.status == 201  # the same run ids: nothing new is written
    history = await (await alice.call("GET", f"/v1/jobs/{job['id']}/runs?limit=100")).json()
    assert sum(1 for r in history["items"] if r["origin"] == "backfill") == 23


async def test_backfill_bounds_and_validation(alice: Caller, bob: Caller):
    minutely = {"type": "cron", "expr": "* * * * *"}
    job = await (await alice.call("POST", "/v1/jobs", json=cron_job(schedule=minutely))).json()
    path = f"/v1/jobs/{job['id']}/backfill"
    now = datetime.now(UTC)
    day = {"from": (now - timedelta(days=1)).isoformat(), "to": now.isoformat()}
    too_many = await problem_of(await alice.call("POST", path, json=day), 422)
    assert too_many["field"] == "to" and "1440 occurrences" in too_many["detail"]
    cases: list[tuple[Any, str]] = [
        ({"from": "yesterday", "to": now.isoformat()}, "from"),
        ({"from": now.isoformat(), "to": (now - timedelta(hours=1)).isoformat()}, "to"),
        ({"from": (now - timedelta(hours=1)).isoformat(), "to": (now + timedelta(hours=1)).isoformat()}, "to"),
        ({"to": now.isoformat()}, "from"),
        ({"from": now.isoformat(), "to": now.isoformat(), "dry": True}, "dry"),
    ]
    for body, field in cases:
        assert (await problem_of(await alice.call("POST", path, json=body), 422)).get("field") == field, body
    await problem_of(await bob.call("POST", path, json={**day, "dryRun": True}), 404)
    paused = await alice.call("PATCH", f"/v1/jobs/{job['id']}", json={"state": "PAUSED"}, headers={"If-Match": '"1"'})
    assert paused.status == 200
    hour = {"from": (now - timedelta(hours=1)).isoformat(), "to": now.isoformat()}
    await problem_of(await alice.call("POST", path, json=hour), 409)
