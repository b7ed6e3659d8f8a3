"""Creates per second and latency of one API process, driven by a small async client.

Starts the API in this process on a free port (its own keyspace is the configured one; make a tenant first),
posts cron jobs from `--concurrency` connections for `--seconds`, prints count, rate and p50/p99 latency.

    .venv/bin/python benchmarks/api_bench.py --seconds 20 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from datetime import UTC, datetime

import aiohttp
from aiohttp import web

from api.app import make_app
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

BODY = {
    "schedule": {"type": "cron", "expr": "0 3 * * *", "tz": "Europe/Paris"},
    "target": {"type": "http", "url": "https://example.com/bench"},
    "payload": {"bench": True},
}


async def drive(url: str, key: str, seconds: float, concurrency: int) -> tuple[list[float], dict[int, int]]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    async def client(http: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            async with http.post(f"{url}/v1/jobs", json=BODY) as answer:
                await answer.read()
            latencies.append(time.perf_counter() - started)
            statuses[answer.status] = statuses.get(answer.status, 0) + 1

    headers = {"Authorization": f"Bearer {key}"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return latencies, statuses


async def main(args: argparse.Namespace) -> None:
    base = Settings.from_env()
    settings = dataclasses.replace(base, api=dataclasses.replace(base.api, requests_per_s=1_000_000))
    store = await CassandraStore.connect(settings.cassandra)
    producer, redis = KafkaProducer(settings.kafka), RedisClient(settings.redis, prefix=f"bench{time.time_ns()}:")
    _, key = await create_tenant(store, f"bench-{time.time_ns()}", datetime.now(UTC))
    runner = web.AppRunner(make_app(settings, store, producer, redis), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    try:
        latencies, statuses = await drive(f"http://127.0.0.1:{args.port}", key, args.seconds, args.concurrency)
    finally:
        await runner.cleanup()
        await producer.close()
        await redis.close()
        await store.close()
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(f"statuses {statuses}; {len(latencies)} requests in {args.seconds:.0f} s")
    print(f"creates/s {statuses.get(201, 0) / args.seconds:.0f}")
    print(f"latency p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--port", type=int, default=18090)
    asyncio.run(main(parser.parse_args()))
