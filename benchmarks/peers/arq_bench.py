"""arq as a peer: deferred jobs (`_defer_until`) on Redis, each making the harness's HTTP call to the sink.

The queue is the local stack's Redis, database 2 (arq's own key names, `arq:*`, live only there), so the
benchmark shares nothing with tickwheel's or Celery's keys and cleans up only its own. The worker is a separate
process (`arq`, one asyncio loop, `max_jobs` calls in flight), started and stopped by the benchmark. The run id
is arq's job id, so a second enqueue of the same run is refused by arq itself.

    /tmp/peers/bin/python -m benchmarks.peers.arq_bench --runs 2000 --window 60

arq pins redis<6, so it runs from a venv of its own (see pyproject.toml), never the project's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import redis
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from benchmarks.peers import harness
from benchmarks.peers.harness import Planned, Submitted
from tickwheel.dev.checker import Expected
from tickwheel.dev.sink import Sink
from tickwheel.dev.stack import process

REDIS_URL = os.environ.get("TWBENCH_ARQ_REDIS", "redis://127.0.0.1:16379/2")
QUEUE = "twbench:arq:queue"
WORKER = "arq-worker"
MAX_JOBS = int(os.environ.get("TWBENCH_ARQ_MAX_JOBS", "256"))


async def call_sink(ctx: dict[str, Any], url: str, run_id: str) -> int:
    """The job: the same POST tickwheel's worker makes (a non-2xx answer raises, and arq retries the job)."""
    body = json.dumps({"runId": run_id}).encode()
    headers = {"content-type": "application/json", "webhook-id": run_id, "idempotency-key": run_id}
    async with ctx["http"].post(url, data=body, headers=headers) as answer:
        answer.raise_for_status()
        return int(answer.status)


async def _startup(ctx: dict[str, Any]) -> None:
    ctx["http"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))


async def _shutdown(ctx: dict[str, Any]) -> None:
    await ctx["http"].close()


class WorkerSettings:
    """What `arq benchmarks.peers.arq_bench.WorkerSettings` runs."""

    functions = [call_sink]
    queue_name = QUEUE
    redis_settings = RedisSettings.from_dsn(REDIS_URL)
    max_jobs = MAX_JOBS
    max_tries = 5
    keep_result = 0
    poll_delay = 0.05
    on_startup = _startup
    on_shutdown = _shutdown


class ArqSystem:
    name = "arq"

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs
        self._pid: int | None = None
        self._pool: ArqRedis | None = None

    async def start(self, sink: Sink) -> None:
        await asyncio.to_thread(_delete_own_keys)
        os.environ["TWBENCH_ARQ_MAX_JOBS"] = str(self.max_jobs)
        argv = [sys.executable, "-m", "arq", "benchmarks.peers.arq_bench.WorkerSettings"]
        self._pid = harness.spawn_peer(WORKER, argv)
        self._pool = await create_pool(RedisSettings.from_dsn(REDIS_URL), default_queue_name=QUEUE)
        await _wait_worker(self._pid)

    async def prepare(self, tenants: Sequence[str]) -> None:
        """Nothing to make: tenants are only paths of the sink's URL here."""

    async def schedule(self, plan: list[Planned], sink: Sink) -> Submitted:
        pool = self._pool
        assert pool is not None

        async def submit(run: Planned) -> Expected:
            url = harness.sink_url(sink, run.tenant)
            await pool.enqueue_job("call_sink", url, str(run.run_id), _job_id=str(run.run_id), _defer_until=run.due_at)
            return Expected(run.run_id, run.tenant, run.due_at)

        return await harness.paced_submit(plan, submit)

    def pids(self) -> list[int]:
        return [self._pid] if self._pid else []

    def server_pids(self) -> list[int]:
        return harness.stack_server_pids("redis")

    async def stop(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
        await asyncio.to_thread(harness.stop_peer, WORKER, self._pid)
        await asyncio.to_thread(_delete_own_keys)


async def _wait_worker(pid: int, timeout_s: float = 60.0) -> None:
    """Until the worker process has written its health-check key (it is then polling the queue)."""
    client = redis.Redis.from_url(REDIS_URL)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and process.is_running(pid):
            if client.exists(QUEUE + ":health-check"):
                return
            await asyncio.sleep(0.3)
    finally:
        client.close()
    log = process.log_path(harness.WORK_DIR, WORKER)
    raise RuntimeError(f"arq worker did not start; last lines of {log}:\n{process.tail(log, 30)}")


def _delete_own_keys() -> None:
    client = redis.Redis.from_url(REDIS_URL)
    keys = [*client.scan_iter(match="arq:*", count=1000), *client.scan_iter(match=f"{QUEUE}*", count=1000)]
    if keys:
        client.delete(*keys)
    client.close()


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-jobs", type=int, default=MAX_JOBS, help="calls in flight (default %(default)s)")


def main() -> int:
    return harness.main(lambda args: ArqSystem(args.max_jobs), "arq deferred jobs on Redis", _options)


if __name__ == "__main__":
    sys.exit(main())
