"""Asynchronous completions per second through one API process: POST /v1/runs/{id}/complete for runs held
RUNNING after a 202 (the report is fenced into the run row and its lease check row written and announced).

    .venv/bin/python -m benchmarks.completion_bench --runs 2000 --concurrency 32

Writes N jobs with `asyncCompletion` and claims their runs (attempt 1, not timed) in its own keyspace
(`tw_bench_async`) and topic prefix, starts `tickwheel api` as its own process on a free port, sends one
heartbeat per run (the reference: an existing endpoint of the same shape), then reports every run once, both
from `--concurrency` connections, and prints both rates, p50/p99 latencies and the load average. The
worker's side (recording the report) is the ordinary outcome path, measured by worker_bench.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp

from benchmarks.api_bench import start_api
from benchmarks.worker_bench import ROOT
from schemas.messages import AsyncCompletionDoc, HttpTarget, JobDefinition, ScheduleDoc, encode
from tickwheel.commands import run_migrate
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.settings import Settings
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import NewRun
from tickwheel.store.tenants import create_tenant

KEYSPACE = "tw_bench_async"


async def held_runs(store: CassandraStore, tenant: str, count: int) -> list[uuid.UUID]:
    """`count` jobs opted in to asynchronous completion, each with its run claimed (attempt 1)."""
    now = datetime.now(UTC).replace(microsecond=0)
    definition = JobDefinition(
        schedule=ScheduleDoc(type="once", run_at=now.isoformat()),
        target=HttpTarget(url="https://example.com/later"),
        async_completion=AsyncCompletionDoc(lease_s=3600, max_lease_s=7200),
    )
    gate = asyncio.Semaphore(64)

    async def one() -> uuid.UUID:
        job_id = uuid.uuid4()
        run = NewRun(run_id_for(job_id, now), job_id, tenant, 1, shard_of(job_id), "default", now, now)
        async with gate:
            await store.execute(
                "INSERT INTO jobs (job_id, tenant_id, shard, state, version, definition, lane)"
                " VALUES (?, ?, ?, 'ACTIVE', 1, ?, 'default')",
                [job_id, tenant, run.shard, encode(definition).decode()],
            )
            await runs.create_run(store, run, now)
            await runs.claim(store, run, 0, "bench", now + timedelta(hours=1), now)
        return run.run_id

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def drive(
    url: str, key: str, run_ids: list[uuid.UUID], concurrency: int, action: str, body: dict[str, object]
) -> tuple[float, list[float], dict[int, int]]:
    pending = list(run_ids)
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def client(http: aiohttp.ClientSession) -> None:
        while pending:
            run_id = pending.pop()
            started = time.perf_counter()
            async with http.post(f"{url}/v1/runs/{run_id}/{action}", json=body) as answer:
                await answer.read()
            latencies.append(time.perf_counter() - started)
            statuses[answer.status] = statuses.get(answer.status, 0) + 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    began = time.perf_counter()
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}, connector=connector) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return time.perf_counter() - began, latencies, statuses


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("TICKWHEEL_ENV_FILE", str(ROOT / ".stack" / "env"))
    settings = Settings.from_env()
    prefix = f"async{uuid.uuid4().hex[:6]}."
    settings = dataclasses.replace(
        settings,
        cassandra=dataclasses.replace(settings.cassandra, keyspace=KEYSPACE),
        kafka=dataclasses.replace(settings.kafka, topic_prefix=prefix),
    )
    await run_migrate(settings)
    store = await CassandraStore.connect(settings.cassandra)
    try:
        tenant, key = await create_tenant(store, f"bench-{time.time_ns()}", datetime.now(UTC))
        run_ids = await held_runs(store, tenant.tenant_id, args.runs)
    finally:
        await store.close()
    port = free_port()
    extra = {"TICKWHEEL_CASSANDRA_KEYSPACE": KEYSPACE, "TICKWHEEL_KAFKA_TOPIC_PREFIX": prefix}
    api = await start_api(port, extra)
    try:
        load_before = os.getloadavg()
        url = f"http://127.0.0.1:{port}"
        # First a heartbeat of every run (the existing endpoint of the same shape: a run read, a job read, a
        # lease check row, one LWT), side by side with the completions that follow, on the same runs.
        beats = await drive(url, key, run_ids, args.concurrency, "heartbeat", {"attempt": 1, "extendByS": 3000})
        body = {"attempt": 1, "outcome": "succeeded", "detail": "bench"}
        seconds, latencies, statuses = await drive(url, key, run_ids, args.concurrency, "complete", body)
    finally:
        api.terminate()
        await api.wait()
    ordered = sorted(latencies)
    print(json.dumps({
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": args.runs,
        "concurrency": args.concurrency,
        "statuses": statuses,
        "completions_per_s": round(statuses.get(202, 0) / seconds, 1),
        "heartbeats_per_s": round(beats[2].get(200, 0) / beats[0], 1),
        "heartbeat_latency_ms": {"p50": round(statistics.median(beats[1]) * 1000, 1),
                                 "p99": round(sorted(beats[1])[int(len(beats[1]) * 0.99) - 1] * 1000, 1)},
        "latency_ms": {"p50": round(statistics.median(ordered) * 1000, 1),
                       "p99": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 1)},
        "loadavg": {"before": load_before, "end": os.getloadavg()},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    asyncio.run(main(parser.parse_args()))
