"""Asynchronous completion through the whole platform: a job created through the API with `asyncCompletion` is
fired by the real dispatcher, its target answers 202, and the run stays RUNNING until POST /v1/runs/{id}/complete
reports it (the API's lease check row goes through the dispatcher's lease-check read to a worker, which records
it); a lease that passes without a report or a heartbeat times the attempt out into the job's retry policy.
Timing is only awaited, never asserted: deadlines are generous for a loaded box."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from tickwheel.dev.sink import Sink
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

WAIT_S = 45.0  # deadline of each wait; a quiet box takes a few seconds


class Tenant:
    """A tenant's key and an HTTP session on the platform's API."""

    def __init__(self, http: aiohttp.ClientSession, api: str, key: str):
        self.http, self.api, self.headers = http, api, {"Authorization": f"Bearer {key}"}

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        async with self.http.request(method, f"{self.api}{path}", json=body, headers=self.headers) as answer:
            return answer.status, await answer.json(content_type=None)

    async def once_job(self, url: str, **fields: Any) -> str:
        """A once job due in two seconds; the id of its run."""
        due = datetime.now(UTC) + timedelta(seconds=2)
        body = {"schedule": {"type": "once", "runAt": due.isoformat()}, "target": {"type": "http", "url": url}}
        status, job = await self.call("POST", "/v1/jobs", {**body, **fields})
        assert status == 201, job
        return str(job["next_run_id"])

    async def run_when(self, run_id: str, done: Any) -> dict[str, Any]:
        """GET the run until `done(run)`; fails with the last one read after WAIT_S."""
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            status, run = await self.call("GET", f"/v1/runs/{run_id}")
            if status == 200 and done(run):
                return dict(run)
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"run {run_id} not as awaited within {WAIT_S} s: {status} {run}")
            await asyncio.sleep(0.25)


def held_under_the_jobs_lease(run: dict[str, Any]) -> bool:
    """RUNNING at attempt 1 under the job's 300 s lease, not the call's (the worker's hold after the 202)."""
    lease_until = run["lease_until"]
    later = datetime.now(UTC) + timedelta(seconds=200)
    return run["status"] == "RUNNING" and run["attempt"] == 1 and bool(lease_until) and parse(lease_until) > later


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
async def tenant(platform: Any, store: CassandraStore) -> Any:
    _, key = await create_tenant(store, f"e2e-async-{uuid.uuid4().hex[:8]}", datetime.now(UTC))
    async with aiohttp.ClientSession() as http:
        yield Tenant(http, platform.api_url, key)


async def test_a_202_holds_the_run_until_its_reported_success_is_recorded(tenant: Tenant, sink: Sink) -> None:
    run_id = await tenant.once_job(sink.url("/later", status=202), asyncCompletion={"leaseS": 300, "maxLeaseS": 900})
    await sink.wait_for("/later", 1, timeout_s=WAIT_S)
    held = await tenant.run_when(run_id, held_under_the_jobs_lease)
    assert held["attempts"] == [], "nothing recorded while the target works"
    status, reported = await tenant.call(
        "POST", f"/v1/runs/{run_id}/complete", {"attempt": 1, "outcome": "succeeded", "detail": "42 rows"}
    )
    assert status == 202 and reported["status"] == "RUNNING", reported
    done = await tenant.run_when(run_id, lambda r: r["status"] != "RUNNING" and r["attempts"])  # rows follow the LWT
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 1), done
    assert [(a["attempt"], a["kind"], a["outcome"], a["response_excerpt"]) for a in done["attempts"]] == [
        (1, "call", "SUCCEEDED", "42 rows")
    ]
    assert len(sink.calls_to("/later")) == 1, "reported once, called once"
    status, again = await tenant.call("POST", f"/v1/runs/{run_id}/complete", {"attempt": 1, "outcome": "succeeded"})
    assert status == 409, again


async def test_a_lease_that_lapses_silently_times_out_into_a_retry(tenant: Tenant, sink: Sink) -> None:
    run_id = await tenant.once_job(
        sink.url("/silent-once", seq="202,200"),
        asyncCompletion={"leaseS": 2, "maxLeaseS": 60},
        retryPolicy={"maxAttempts": 2, "baseDelayS": 0.5, "maxDelayS": 1, "jitter": 0},
    )
    done = await tenant.run_when(run_id, lambda r: r["status"] in ("SUCCEEDED", "DEAD") and len(r["attempts"]) >= 2)
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 2), done
    assert [(a["attempt"], a["kind"], a["outcome"]) for a in done["attempts"]] == [
        (1, "lease_expired", "RETRY"),
        (2, "call", "SUCCEEDED"),
    ]
    assert len(sink.calls_to("/silent-once")) == 2
