"""Creates per second and latency of one API process, driven by a small async client.

Starts `tickwheel api` as a separate process on `--port` (on the configured keyspace and topics), makes a
tenant, posts cron jobs from `--concurrency` connections for `--seconds`, prints count, rate and p50/p99 latency.

    .venv/bin/python benchmarks/api_bench.py --seconds 20 --concurrency 32
    .venv/bin/python benchmarks/api_bench.py --seconds 20 --concurrency 4 --batch 500   # POST /v1/jobs/batch

With `--batch N` each request is a batch of N bodies; the rate counted is jobs created (items answered 201).
`--keyed` sends an Idempotency-Key with every request (the keyed create: one LWT per job). The API process's CPU
over the drive (user + system, from /proc) is printed per created job, and that of every `--cpu-of NAME=PID`
(e.g. the Cassandra server), and the client's own. Rates are over the drive's whole time: requests are sent for
`--seconds`, and the last ones (a batch of 500 takes seconds) end after it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from tickwheel.dev.platform import local_settings
from tickwheel.dev.stack import stack_dir
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

BODY = {
    "schedule": {"type": "cron", "expr": "0 3 * * *", "tz": "Europe/Paris"},
    "target": {"type": "http", "url": "https://example.com/bench"},
    "payload": {"bench": True},
}


async def drive(
    url: str, key: str, seconds: float, concurrency: int, batch: int = 0, keyed: bool = False
) -> tuple[list[float], dict[int, int]]:
    """Latency per request and the count of each status (per item for batches)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    async def client(http: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            headers = {"Idempotency-Key": uuid.uuid4().hex} if keyed else {}
            if batch:
                body = {"jobs": [BODY] * batch}
                async with http.post(f"{url}/v1/jobs/batch", json=body, headers=headers) as answer:
                    items = (await answer.json())["items"] if answer.status == 200 else []
                for item in items or [{"status": answer.status}]:
                    statuses[item["status"]] = statuses.get(item["status"], 0) + 1
            else:
                async with http.post(f"{url}/v1/jobs", json=BODY, headers=headers) as answer:
                    await answer.read()
                statuses[answer.status] = statuses.get(answer.status, 0) + 1
            latencies.append(time.perf_counter() - started)

    headers = {"Authorization": f"Bearer {key}"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return latencies, statuses


async def start_api(
    port: int, extra_env: dict[str, str] | None = None, code: Path | None = None
) -> asyncio.subprocess.Process:
    """`tickwheel api` as its own process (the one being measured), with no request-rate quota; with `code`, that
    directory's packages (a `git archive` of another commit: `-m` puts the working directory first on the path)."""
    env = {**os.environ, "TICKWHEEL_ENV_FILE": str(stack_dir() / "env")}
    env |= {"TICKWHEEL_API_PORT": str(port), "TICKWHEEL_API_REQUESTS_PER_S": "1000000", **(extra_env or {})}
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "tickwheel.cli", "api", env=env, cwd=code)
    async with aiohttp.ClientSession() as http:
        for _ in range(100):
            try:
                async with http.get(f"http://127.0.0.1:{port}/readyz") as answer:
                    if answer.status == 200:
                        return process
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    process.terminate()
    raise SystemExit("the API did not become ready")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _named_pid(text: str) -> tuple[str, int]:
    name, _, pid = text.partition("=")
    return name, int(pid)


async def main(args: argparse.Namespace) -> None:
    store = await CassandraStore.connect(local_settings().cassandra)
    try:
        _, key = await create_tenant(store, f"bench-{time.time_ns()}", datetime.now(UTC))
    finally:
        await store.close()
    api = await start_api(args.port)
    try:
        url = f"http://127.0.0.1:{args.port}"
        # the client too: on one box what it spends encoding requests is CPU the API and the servers do not get
        pids = {"api": api.pid, **dict(_named_pid(text) for text in args.cpu_of), "client": os.getpid()}
        cpu_before = {name: cpu_s(pid) for name, pid in pids.items()}
        started = time.monotonic()
        latencies, statuses = await drive(url, key, args.seconds, args.concurrency, args.batch, args.keyed)
        elapsed_s = time.monotonic() - started  # the last requests end after --seconds (a batch takes seconds)
        cpu_used = {name: cpu_s(pid) - cpu_before[name] for name, pid in pids.items()}
    finally:
        api.terminate()
        await api.wait()
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(f"statuses {statuses}; {len(latencies)} requests in {elapsed_s:.1f} s (sent for {args.seconds:.0f} s)")
    unit = f" (batches of {args.batch})" if args.batch else ""
    created = statuses.get(201, 0)
    print(f"creates/s {created / elapsed_s:.0f}{unit}")
    print(f"latency p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    for name, used_s in cpu_used.items():
        per_job = f"{used_s * 1000 / created:.2f} ms per created job" if created else "no job created"
        print(f"{name} cpu {used_s:.1f} s over the drive ({used_s / elapsed_s:.2f} cores), {per_job}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument("--batch", type=int, default=0, help="jobs per POST /v1/jobs/batch (0: single creates)")
    parser.add_argument("--keyed", action="store_true", help="an Idempotency-Key on every request")
    parser.add_argument("--cpu-of", action="append", default=[], metavar="NAME=PID", help="also report its CPU")
    asyncio.run(main(parser.parse_args()))
