"""Celery as a peer: ETA tasks on a Redis broker, each task making the harness's HTTP call to the sink.

The broker is the local stack's Redis, database 1, every key under `twbench:celery:` (kombu's
`global_keyprefix`), so the benchmark shares nothing with tickwheel's keys and cleans up only its own.
The worker is a separate process (`celery worker`, thread pool), started and stopped by the benchmark.

    .venv/bin/python -m benchmarks.peers.celery_bench --runs 2000 --window 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import redis
import requests
from celery import Celery

from benchmarks.peers import harness
from benchmarks.peers.harness import Planned, Submitted
from tickwheel.dev.checker import Expected
from tickwheel.dev.sink import Sink
from tickwheel.dev.stack import process
from tickwheel.settings import RedisSettings, read_env_file

STACK_ENV = Path(__file__).resolve().parents[2] / ".stack" / "env"


def stack_broker_url() -> str:
    """The local stack's Redis (wherever `.stack/env` says it is), database 1."""
    url = read_env_file(STACK_ENV).get("TICKWHEEL_REDIS", RedisSettings().url)
    return url.rsplit("/", 1)[0] + "/1"


BROKER_URL = os.environ.get("TWBENCH_CELERY_BROKER") or stack_broker_url()
KEY_PREFIX = "twbench:celery:"
QUEUE = "twbench"
WORKER = "celery-worker"

app = Celery("twbench", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": KEY_PREFIX, "visibility_timeout": 3600},
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=4,
    timezone="UTC",
    enable_utc=True,
)


@app.task(  # type: ignore[untyped-decorator]
    name="twbench.call_sink", autoretry_for=(requests.RequestException,), retry_backoff=1, max_retries=5
)
def call_sink_task(url: str, run_id: str) -> None:
    """The job: the same POST tickwheel's worker makes, retried on connection errors and non-2xx answers."""
    harness.call_sink(url, run_id)


class CelerySystem:
    name = "celery"

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._pid: int | None = None

    async def start(self, sink: Sink) -> None:
        await asyncio.to_thread(_delete_own_keys)
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "benchmarks.peers.celery_bench",
            "worker",
            "-Q",
            QUEUE,
            "--pool",
            "threads",
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--hostname",
            f"twbench-{os.getpid()}@%h",
        ]
        self._pid = harness.spawn_peer(WORKER, argv)
        await asyncio.to_thread(_wait_worker, self._pid)

    async def prepare(self, tenants: Sequence[str]) -> None:
        """Nothing to make: tenants are only paths of the sink's URL here."""

    async def schedule(self, plan: list[Planned], sink: Sink) -> Submitted:
        async def submit(run: Planned) -> Expected:
            url = harness.sink_url(sink, run.tenant)
            await asyncio.to_thread(call_sink_task.apply_async, (url, str(run.run_id)), eta=run.due_at)
            return Expected(run.run_id, run.tenant, run.due_at)

        return await harness.paced_submit(plan, submit)

    def pids(self) -> list[int]:
        return [self._pid] if self._pid else []

    def server_pids(self) -> list[int]:
        return harness.stack_server_pids("redis")

    async def stop(self) -> None:
        await asyncio.to_thread(harness.stop_peer, WORKER, self._pid)
        await asyncio.to_thread(_delete_own_keys)


def _wait_worker(pid: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process.is_running(pid):
            break
        if app.control.ping(timeout=1.0):
            return
    log = process.log_path(harness.WORK_DIR, WORKER)
    raise RuntimeError(f"celery worker did not answer a ping; last lines of {log}:\n{process.tail(log, 30)}")


def _delete_own_keys() -> None:
    client = redis.Redis.from_url(BROKER_URL)
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", type=int, default=32, help="worker threads (default %(default)s)")


def main() -> int:
    return harness.main(lambda args: CelerySystem(args.concurrency), "Celery ETA tasks on Redis", _options)


if __name__ == "__main__":
    sys.exit(main())
