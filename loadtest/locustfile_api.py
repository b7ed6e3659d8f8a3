"""API load: a per-tenant mix of create, get, list and patch against /v1/jobs.

Run it through `loadtest/run.py api` (it creates the tenants and bounds the run); the mix is
`TW_LOAD_MIX=create=3,get=5,list=2,patch=1` (weights). Created jobs are once-jobs due a day or more ahead, so
this measures the API and its writes, not firing. A 429 (the tenant's request quota) counts as a failure
named by its status, so the quota shows in the results rather than being hidden.
"""

from __future__ import annotations

import os
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import common
from locust import FastHttpUser, between

from benchmarks.peers.tickwheel_bench import once_job

FAR_TARGET = "http://127.0.0.1:9/never-called"  # due in a day or more: the load test ends long before


MIX = common.parse_mix(os.environ.get("TW_LOAD_MIX", common.DEFAULT_MIX))


class TenantApiUser(FastHttpUser):
    """One API client of one tenant, remembering the jobs it created (id -> version) to read and change."""

    wait_time = between(0.05, 0.25)

    def on_start(self) -> None:
        self.tenant, key = common.next_tenant()
        self.headers = common.auth(key)
        self.jobs: dict[str, int] = {}
        self.create()

    def create(self) -> None:
        due = datetime.now(UTC) + timedelta(days=1, seconds=random.randint(0, 86_400))
        body = once_job(due, FAR_TARGET, f"load-{uuid.uuid4()}")
        with self._call("POST", "/v1/jobs", "create", json=body, ok=201) as answer:
            if answer.status_code == 201:
                doc = answer.json()
                self.jobs[doc["id"]] = doc["version"]

    def get(self) -> None:
        job_id = self._some_job()
        if job_id:
            with self._call("GET", f"/v1/jobs/{job_id}", "get", ok=200):
                pass

    def list_jobs(self) -> None:
        with self._call("GET", "/v1/jobs?limit=50", "list", ok=200):
            pass

    def patch(self) -> None:
        job_id = self._some_job()
        if not job_id:
            return
        headers = {**self.headers, "If-Match": f'"{self.jobs[job_id]}"'}
        body = {"labels": {"touched": str(random.randint(0, 1_000_000))}}
        with self._call("PATCH", f"/v1/jobs/{job_id}", "patch", json=body, headers=headers, ok=200) as answer:
            if answer.status_code == 200:
                self.jobs[job_id] = answer.json()["version"]

    def _some_job(self) -> str | None:
        return random.choice(list(self.jobs)) if self.jobs else None

    def _call(self, method: str, path: str, name: str, *, ok: int, headers: Any = None, **kw: Any) -> Any:
        """A request named by operation (not by job id, which would make every row of the stats its own)."""
        response = self.client.request(
            method, path, name=name, headers=headers or self.headers, catch_response=True, **kw
        )
        return _Checked(response, ok)

    # Locust picks uniformly from this list, so an operation listed w times has weight w (0 leaves it out).
    tasks = [*[create] * MIX.get("create", 0), *[get] * MIX.get("get", 0), *[list_jobs] * MIX.get("list", 0),
             *[patch] * MIX.get("patch", 0)]  # fmt: skip


class _Checked:
    """`with` over a catch_response context: anything but the expected status is a failure named by its status."""

    def __init__(self, response_context: Any, ok: int) -> None:
        self._context = response_context
        self._ok = ok

    def __enter__(self) -> Any:
        self._answer = self._context.__enter__()
        if self._answer.status_code != self._ok:
            self._answer.failure(f"HTTP {self._answer.status_code}")
        return self._answer

    def __exit__(self, *exc: object) -> Any:
        return self._context.__exit__(*exc)
