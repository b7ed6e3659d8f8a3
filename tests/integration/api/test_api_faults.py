"""Fault test: Cassandra stopped in the middle of a test. Creates answer 503 with Retry-After (never 201),
and service resumes once Cassandra is back.

This module STOPS the shared Cassandra of the local stack for a few seconds: run it alone, when no one else
uses the stack:  .venv/bin/python -m pytest -p no:cacheprovider tests/integration/api/test_api_faults.py
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.conftest import server_of
from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import STACK_DIR, Caller
from tickwheel.dev.stack import start_server, stop_server

RECOVERY_TIMEOUT_S = 120


@pytest.mark.restarts_servers
async def test_cassandra_down_gives_503_with_retry_after_then_service_resumes(alice: Caller, make_client: Any):
    fast = await make_client(auth_cache_s=300.0)  # the key stays trusted while Cassandra is down
    alice.client = fast
    assert (await alice.call("POST", "/v1/jobs", json=cron_job())).status == 201
    before = len((await (await alice.call("GET", "/v1/jobs")).json())["items"])
    cassandra = server_of("cassandra")  # `cassandra-1` on a stack started with --hosts
    assert await asyncio.to_thread(stop_server, STACK_DIR, cassandra)
    try:
        response = await alice.call("POST", "/v1/jobs", json=cron_job(name="while down"))
        assert response.status == 503, await response.text()
        assert response.content_type == "application/problem+json"
        assert int(response.headers["Retry-After"]) >= 1
    finally:
        await asyncio.to_thread(start_server, STACK_DIR, cassandra)
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    status = 0
    while time.monotonic() < deadline:
        status = (await alice.call("POST", "/v1/jobs", json=cron_job(name="after"))).status
        if status == 201:
            break
        assert status == 503
        await asyncio.sleep(1.0)
    assert status == 201
    names = [j.get("name") for j in (await (await alice.call("GET", "/v1/jobs")).json())["items"]]
    assert len(names) == before + 1 and "while down" not in names
