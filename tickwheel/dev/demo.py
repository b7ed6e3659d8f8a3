"""`tickwheel up --demo`: a demo tenant, three jobs against a local sink, and their runs as they happen.

Everything goes through the public HTTP API with the demo tenant's key, exactly as a client would; the sink is
the platform's own test target (`tickwheel sink`), which records every call it receives.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from tickwheel.dev.platform import console_url
from tickwheel.dev.stack import process
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

SINK_PORT = 8099
DEMO_TIMEOUT_S = 150.0


def start_sink(stack_dir: Path) -> str:
    """The sink as a platform process (reused when it already answers)."""
    base = f"http://127.0.0.1:{SINK_PORT}"
    if not _answers(f"{base}/_sink/calls"):
        process.terminate(stack_dir, "sink")
        process.spawn(stack_dir, "sink", [sys.executable, "-m", "tickwheel.cli", "sink", "--port", str(SINK_PORT)])
        deadline = time.monotonic() + 20
        while not _answers(f"{base}/_sink/calls"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the demo sink did not start; see {process.log_path(stack_dir, 'sink')}")
            time.sleep(0.2)
    return base


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def demo_jobs(sink: str, now: datetime) -> dict[str, dict[str, Any]]:
    """The three demo jobs: a one-off in 10 s, a cron every minute in Kolkata, one that fails into the DLQ."""
    return {
        "one-off in 10 s": {
            "name": "demo one-off",
            "schedule": {"type": "once", "runAt": (now + timedelta(seconds=10)).isoformat()},
            "target": {"type": "http", "url": f"{sink}/demo/once"},
            "payload": {"hello": "world"},
        },
        "cron every minute, Asia/Kolkata": {
            "name": "demo cron",
            "schedule": {"type": "cron", "expr": "* * * * *", "tz": "Asia/Kolkata"},
            "target": {"type": "http", "url": f"{sink}/demo/cron"},
            "payload": {"report": "minutely"},
            "priority": "urgent",
        },
        "always answered 500 (retries, then dead letter)": {
            "name": "demo failing",
            "schedule": {"type": "once", "runAt": (now + timedelta(seconds=5)).isoformat()},
            "target": {"type": "http", "url": f"{sink}/demo/failing?status=500"},
            "payload": {"will": "fail"},
            "retryPolicy": {"maxAttempts": 3, "baseDelayS": 1, "maxDelayS": 4},
        },
    }


def save_key(stack_dir: Path, key: str) -> Path:
    """Write the demo tenant's API key readable by its owner only (0600 whatever the umask, even over an
    older file that was more open)."""
    key_file = stack_dir / "demo-api-key"
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(key + "\n")
    return key_file


async def run_demo(settings: Settings, stack_dir: Path) -> int:
    sink = start_sink(stack_dir)
    print(f"\n== demo: a local sink records every call at {sink}")
    store = await CassandraStore.connect(settings.cassandra)
    try:
        tenant, key = await create_tenant(store, f"demo-{int(time.time())}", datetime.now(UTC))
    finally:
        await store.close()
    key_file = save_key(stack_dir, key)
    print(f"tenant {tenant.name} (id {tenant.tenant_id}); its API key is in {key_file}")
    print(f"console: {console_url(settings)}  sign in with {key}  (the demo jobs fire there too)")
    api = f"http://127.0.0.1:{settings.api.port}"
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
        jobs = await _create_jobs(http, api, demo_jobs(sink, datetime.now(UTC)))
        ok = await _watch(http, api, jobs)
    print("\nlook further:")
    print(f"  {console_url(settings)}   the web console; sign in with the key in {key_file}")
    print(f"  export TICKWHEEL_API_URL={api} TICKWHEEL_API_KEY=$(cat {key_file})")
    print("  .venv/bin/tickwheel jobs list                                     # the demo's jobs")
    print("  .venv/bin/tickwheel runs list JOB_ID                              # a job's runs")
    print(f"  curl -s {sink}/_sink/calls | python3 -m json.tool | less      # what the sink received")
    print("  .venv/bin/tickwheel down [--all]                                  # stop")
    return 0 if ok else 1


async def _create_jobs(http: aiohttp.ClientSession, api: str, bodies: dict[str, dict[str, Any]]) -> dict[str, str]:
    jobs = {}
    for title, body in bodies.items():
        async with http.post(f"{api}/v1/jobs", json=body) as answer:
            document = await answer.json()
            if answer.status != 201:
                raise RuntimeError(f"creating {title!r} answered {answer.status}: {document}")
        jobs[title] = document["id"]
        print(f"created {title!r}: job {document['id']}, next run at {document['next_run_at']}")
    return jobs


async def _watch(http: aiohttp.ClientSession, api: str, jobs: dict[str, str]) -> bool:
    """Print each job's runs as they change until every job has shown what it demonstrates."""
    print("\n== watching the runs (Ctrl-C to stop watching; the platform keeps running)")
    seen: dict[str, str] = {}
    deadline = time.monotonic() + DEMO_TIMEOUT_S
    while time.monotonic() < deadline:
        states = {title: await _runs(http, api, job_id) for title, job_id in jobs.items()}
        for title, runs in states.items():
            line = ", ".join(f"{r['scheduled_at'][11:19]} {r['status']} (attempt {r['attempt']})" for r in runs[:3])
            if seen.get(title) != line:
                seen[title] = line
                print(f"  [{datetime.now(UTC):%H:%M:%S}] {title}: {line or 'no runs yet'}")
        if _demonstrated(states):
            print("\nall three behaved as promised: on time, chained, retried and dead-lettered.")
            return True
        await asyncio.sleep(1.0)
    print("\nthe demo did not see every outcome in time; see .stack/*/ *.log")
    return False


async def _runs(http: aiohttp.ClientSession, api: str, job_id: str) -> list[dict[str, Any]]:
    async with http.get(f"{api}/v1/jobs/{job_id}/runs") as answer:
        return list((await answer.json()).get("items", [])) if answer.status == 200 else []


def _demonstrated(states: dict[str, list[dict[str, Any]]]) -> bool:
    once, cron, failing = states.values()
    return (
        any(r["status"] == "SUCCEEDED" for r in once)
        and any(r["status"] == "SUCCEEDED" for r in cron)
        and any(r["status"] == "DEAD" for r in failing)
    )
