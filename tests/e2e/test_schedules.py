"""Issue 17 on the whole platform (api, coordinator, dispatcher, worker as processes): a triggered run is fired by
the dispatcher and called by the worker with the scheduled time in its headers and its templated payload; a
paused job runs a forced trigger and nothing else; the schedule's own chain is untouched by triggers."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from tickwheel.dev.sink import Sink
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant


class Client:
    def __init__(self, http: aiohttp.ClientSession, api: str, key: str):
        self.http, self.api, self.key = http, api, key

    async def call(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        async with self.http.request(
            method, f"{self.api}{path}", json=body, headers={"Authorization": f"Bearer {self.key}", **headers}
        ) as answer:
            return answer.status, await answer.json() if answer.status != 204 else None


@pytest.fixture
async def client(platform: object, store: CassandraStore) -> AsyncIterator[Client]:
    """A fresh tenant's client of the platform's API."""
    _, key = await create_tenant(store, f"e2e-{uuid.uuid4().hex[:8]}", datetime.now(UTC))
    async with aiohttp.ClientSession() as http:
        yield Client(http, platform.api_url, key)  # type: ignore[attr-defined]


async def test_triggered_runs_reach_the_target_with_their_scheduled_time_and_a_rendered_payload(
    client: Client, sink: Sink
) -> None:
    status, job = await client.call("POST", "/v1/jobs", {
        "name": "hourly-sync",
        "schedule": {"type": "cron", "expr": "0 * * * *", "tz": "Asia/Kolkata"},
        "target": {"type": "http", "url": sink.url("/trigger")},
        "payload": {"at": "{{scheduled_at}}", "local": "{{scheduled_at_local}}", "name": "{{job_name}}"},
        "payloadTemplate": True,
    })  # fmt: skip
    assert status == 201, job
    at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    status, run = await client.call("POST", f"/v1/jobs/{job['id']}/trigger", {"at": at.isoformat()})
    assert status == 201, run
    [call] = await sink.wait_for("/trigger", 1, timeout_s=30)
    assert call.header("X-Tickwheel-Scheduled-At") == run["scheduled_at"] == at.isoformat(timespec="milliseconds")
    assert call.header("X-Tickwheel-Run-Id") == run["id"] == call.header("webhook-id")
    assert call.header("X-Tickwheel-Attempt") == "1"
    assert json.loads(call.body) == {
        "at": at.isoformat(timespec="milliseconds"),
        "local": (at + timedelta(hours=5, minutes=30)).replace(tzinfo=None).isoformat(timespec="milliseconds")
        + "+05:30",
        "name": "hourly-sync",
    }
    status, paused = await client.call(
        "PATCH", f"/v1/jobs/{job['id']}", {"state": "PAUSED"}, **{"If-Match": f'"{job["version"]}"'}
    )
    assert status == 200, paused
    status, forced = await client.call("POST", f"/v1/jobs/{job['id']}/trigger", {"force": True})
    assert status == 201, forced
    calls = await sink.wait_for("/trigger", 2, timeout_s=30)
    assert calls[1].header("X-Tickwheel-Run-Id") == forced["id"]
    origins: dict[str, tuple[str, str]] = {}
    for _ in range(50):  # the outcome is recorded just after the call
        status, history = await client.call("GET", f"/v1/jobs/{job['id']}/runs")
        origins = {r["id"]: (r["origin"], r["status"]) for r in history["items"]}
        if origins.get(run["id"], ("", ""))[1] == origins.get(forced["id"], ("", ""))[1] == "SUCCEEDED":
            break
        await asyncio.sleep(0.2)
    assert origins[run["id"]] == ("trigger", "SUCCEEDED") and origins[forced["id"]] == ("trigger", "SUCCEEDED")
    assert origins[job["next_run_id"]] == ("schedule", "CANCELLED")  # the pause cancelled the hourly run


async def scheduled_instants(sink: Sink, path: str) -> list[datetime]:
    return sorted({datetime.fromisoformat(c.header("X-Tickwheel-Scheduled-At") or "") for c in sink.calls_to(path)})


async def test_the_dispatcher_chains_the_union_of_calendars_minus_exclusions_skips_and_a_pause(
    client: Client, sink: Sink
) -> None:
    start = (datetime.now(UTC) + timedelta(seconds=10)).replace(microsecond=0)
    end = start + timedelta(seconds=90)
    status, job = await client.call("POST", "/v1/jobs", {
        "schedule": {
            "type": "cron", "expr": "0,20,40 * * * * *", "tz": "Europe/Paris",
            "calendars": [{"expr": "*/30 * * * * *", "tz": "Asia/Kolkata"}],
            "exclude": {"except": ["40 * * * * *"]},
            "startAt": start.isoformat(), "endAt": end.isoformat(),
        },
        "target": {"type": "http", "url": sink.url("/union")},
    })  # fmt: skip
    assert status == 201, job
    status, preview = await client.call("GET", f"/v1/jobs/{job['id']}/preview?count=40")
    planned = [datetime.fromisoformat(f["at"]) for f in preview["fires"]]
    assert {f["expr"] for f in preview["fires"]} == {"0,20,40 * * * * *", "*/30 * * * * *"}
    pause_until = start + timedelta(seconds=16)
    after_pause = [at for at in planned if at >= pause_until]
    skip = after_pause[1]
    status, skipped = await client.call("POST", f"/v1/jobs/{job['id']}/skip", {"occurrence": skip.isoformat()})
    assert status == 200, skipped
    status, paused = await client.call("POST", f"/v1/jobs/{job['id']}/pause", {"until": pause_until.isoformat()})
    assert status == 200, paused
    assert datetime.now(UTC) < start, "the test's requests took longer than its lead time"
    wanted = [at for at in after_pause if at != skip]
    received: list[datetime] = []
    while datetime.now(UTC) < end + timedelta(seconds=60):  # a loaded box calls late, not never
        received = await scheduled_instants(sink, "/union")
        if set(wanted) <= set(received) and datetime.now(UTC) > end + timedelta(seconds=1):
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)  # a wrong occurrence fired beside the last one is answered by now
    received = await scheduled_instants(sink, "/union")
    assert received == wanted, (received, planned)
    assert len(received) >= 2 and all(at.second != 40 for at in received)  # the except expression


async def test_backfilled_runs_are_called_now_with_their_past_occurrence_as_scheduled_time(
    client: Client, sink: Sink
) -> None:
    anchor = (datetime.now(UTC) - timedelta(minutes=5)).replace(microsecond=0)
    status, job = await client.call("POST", "/v1/jobs", {
        "schedule": {"type": "interval", "everyS": 30, "anchorAt": anchor.isoformat()},
        "target": {"type": "http", "url": sink.url("/backfill")},
        "payload": {"for": "{{scheduled_at}}"}, "payloadTemplate": True, "delayToleranceS": 2,
    })  # fmt: skip
    assert status == 201, job
    span = {"from": anchor.isoformat(), "to": (anchor + timedelta(minutes=2)).isoformat()}
    status, made = await client.call("POST", f"/v1/jobs/{job['id']}/backfill", span)
    assert status == 201 and made["count"] == 4, made
    ids = {r["id"] for r in made["runs"]}
    backfilled: list[Any] = []
    for _ in range(150):  # the job's own schedule calls the same URL every 30 s: wait for the backfilled ones
        backfilled = [c for c in sink.calls_to("/backfill") if c.header("X-Tickwheel-Run-Id") in ids]
        if len(backfilled) >= 4:
            break
        await asyncio.sleep(0.2)
    expected = [anchor + timedelta(seconds=30 * k) for k in range(4)]
    assert sorted(datetime.fromisoformat(c.header("X-Tickwheel-Scheduled-At") or "") for c in backfilled) == expected
    assert sorted(datetime.fromisoformat(json.loads(c.body)["for"]) for c in backfilled) == expected
