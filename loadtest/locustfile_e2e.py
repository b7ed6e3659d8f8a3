"""End-to-end load: a steady rate of once-jobs, each due `TW_E2E_AHEAD_S` ahead, calling the runner's sink.

Run it through `loadtest/run.py e2e` (it starts the sink, sets the rate per user, and after Locust stops waits for
the last runs and checks every call). Each 201 is appended to `$TW_LOAD_DIR/expected-<pid>.jsonl`
(run id, tenant, due instant): the runner's checker compares them with what the sink received, so start lag,
lost and duplicate runs come from the sink's clock, while Locust's own stats measure the create requests.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import IO

import common
from locust import FastHttpUser, constant_throughput, task

from benchmarks.peers.harness import SINK_PATH_PREFIX
from benchmarks.peers.tickwheel_bench import instant, once_job

AHEAD_S = common.env_float("TW_E2E_AHEAD_S", 5.0)
RATE_PER_USER = common.env_float("TW_E2E_RATE_PER_USER", 1.0)
SINK_URL = os.environ.get("TW_SINK_URL", "http://127.0.0.1:1")
_expected: IO[str] | None = None


def record_expected(run_id: str, tenant: str, due_at: datetime) -> None:
    """One accepted run, for the runner's checker (one file per Locust process, flushed per line)."""
    global _expected
    if _expected is None:
        _expected = (common.LOAD_DIR / f"expected-{os.getpid()}.jsonl").open("a", buffering=1)
    _expected.write(json.dumps({"run_id": run_id, "tenant": tenant, "due_at": instant(due_at)}) + "\n")


class SchedulingUser(FastHttpUser):
    """Schedules once-jobs for one tenant at a constant rate."""

    wait_time = constant_throughput(RATE_PER_USER)

    def on_start(self) -> None:
        self.tenant, key = common.next_tenant()
        self.headers = common.auth(key)
        self.target = f"{SINK_URL}{SINK_PATH_PREFIX}{self.tenant}"

    @task
    def schedule_once(self) -> None:
        due = datetime.now(UTC) + timedelta(seconds=AHEAD_S)
        due = due.replace(microsecond=due.microsecond // 1000 * 1000)
        body = once_job(due, self.target, f"e2e-{uuid.uuid4()}")
        with self.client.post(
            "/v1/jobs", json=body, headers=self.headers, name="create once", catch_response=True
        ) as answer:
            if answer.status_code != 201:
                answer.failure(f"HTTP {answer.status_code}")
                return
            record_expected(answer.json()["next_run_id"], self.tenant, due)
