"""Worker benchmark: runs per second one `tickwheel worker` process completes against a local sink answering in
5 ms and in 200 ms, and the Cassandra statements the worker issues per run.

    .venv/bin/python -m benchmarks.worker_bench --runs 600

Each pass writes N jobs and runs (not timed), starts one worker process, produces the N DueRun messages onto the
default lane at once (as the dispatcher would), and times from the first claim to the last finish recorded
on the run rows (so process start-up and group join are not counted). The statement count comes from a second,
in-process worker whose store counts its calls. Uses its own keyspace and topic prefix on the local stack; flow
limits are raised so they do not cap the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schemas.messages import DueRun, HttpTarget, JobDefinition, RetryDoc, ScheduleDoc, encode, topic_names
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.commands import run_migrate
from tickwheel.core.ids import epoch_ms, run_id_for, shard_of
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import NewRun

ROOT = Path(__file__).resolve().parent.parent
TENANT = "bench"
OVERRIDES = {
    "TICKWHEEL_CASSANDRA_KEYSPACE": "tw_bench_worker",
    "TICKWHEEL_KAFKA_LANE_PARTITIONS": "4",
    "TICKWHEEL_WORKER_LANES": "default",
    "TICKWHEEL_WORKER_EGRESS_ALLOW": "127.0.0.1/32",
    "TICKWHEEL_WORKER_TARGET_RATE_PER_S": "1000000",
    "TICKWHEEL_WORKER_TARGET_CONCURRENCY": "100000",
    "TICKWHEEL_WORKER_TENANT_CONCURRENCY": "100000",
    "TICKWHEEL_WORKER_PORT": "18182",
    "TICKWHEEL_LOG_LEVEL": "WARNING",
}


async def write_runs(
    store: CassandraStore, settings: Settings, url: str, count: int, *, tenant: str = TENANT
) -> list[DueRun]:
    now = datetime.now(UTC).replace(microsecond=0)
    definition = JobDefinition(
        schedule=ScheduleDoc(type="once", run_at=now.isoformat()), target=HttpTarget(url=url), retry_policy=RetryDoc()
    )
    gate = asyncio.Semaphore(64)

    async def one() -> DueRun:
        job_id = uuid.uuid4()
        run = NewRun(run_id_for(job_id, now), job_id, tenant, 1, shard_of(job_id), "default", now, now)
        async with gate:
            await store.execute(
                "INSERT INTO jobs (job_id, tenant_id, shard, state, version, definition, lane)"
                " VALUES (?, ?, ?, 'ACTIVE', 1, ?, 'default')",
                [job_id, tenant, run.shard, encode(definition).decode()],
            )
            await runs.create_run(store, run, now)
        ms = epoch_ms(now)
        return DueRun(run.run_id, job_id, tenant, run.shard, 0, "run", "default", 1, ms, ms)

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def wait_done(store: CassandraStore, dues: list[DueRun], timeout_s: float) -> tuple[float, float]:
    """Poll until every run is SUCCEEDED; returns the first claim and the last finish (unix seconds)."""
    deadline = time.monotonic() + timeout_s
    pending = {d.run_id for d in dues}
    first, last = float("inf"), 0.0
    while pending and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        rows = await asyncio.gather(*(runs.get_run(store, rid) for rid in list(pending)[:400]))
        for row in rows:
            if row and row.status == "SUCCEEDED" and row.started_at and row.finished_at:
                pending.discard(row.run_id)
                first = min(first, row.started_at.timestamp())
                last = max(last, row.finished_at.timestamp())
    if pending:
        raise TimeoutError(f"{len(pending)} runs not finished")
    return first, last


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tickwheel.cli", "worker"], env=env, cwd=ROOT)


async def timed_pass(settings: Settings, store: CassandraStore, sink: Sink, delay_ms: int, count: int) -> float:
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    # Own topics and own Redis keys: the flow-control slots of a platform running on the same stack are not ours.
    env = {**os.environ, **OVERRIDES, "TICKWHEEL_KAFKA_TOPIC_PREFIX": prefix, "TICKWHEEL_REDIS_KEY_PREFIX": prefix}
    local = dataclasses.replace(settings, kafka=dataclasses.replace(settings.kafka, topic_prefix=prefix))
    await run_migrate(local)
    dues = await write_runs(store, local, sink.url(f"/d{delay_ms}", delay_ms=delay_ms), count)
    worker = start_worker(env)
    try:
        await asyncio.sleep(4)  # connect and join the group
        producer = KafkaProducer(local.kafka)
        topic = topic_names(prefix)["default"]
        await asyncio.gather(*(producer.send(topic, encode(d), key=str(d.job_id).encode()) for d in dues))
        await producer.close()
        started, finished = await wait_done(store, dues, timeout_s=300)
    finally:
        worker.terminate()
        worker.wait(30)
    return count / (finished - started)


async def count_statements(settings: Settings, sink: Sink, count: int) -> Counter[str]:
    """Run `count` runs through an in-process worker whose store counts every statement it issues."""
    from worker.main import Worker

    prefix = f"bench{uuid.uuid4().hex[:6]}."
    local = dataclasses.replace(
        settings,
        kafka=dataclasses.replace(settings.kafka, topic_prefix=prefix),
        worker=dataclasses.replace(
            settings.worker,
            lanes=("default",),
            egress_allow=("127.0.0.1/32",),
            target_rate_per_s=1e6,
            target_concurrency=100_000,
            tenant_concurrency=100_000,
        ),
    )
    await run_migrate(local)
    store = await CassandraStore.connect(local.cassandra)
    dues = await write_runs(store, local, sink.url("/count"), count)
    counts: Counter[str] = Counter()
    worker = Worker(local, redis_prefix=f"{prefix}:")
    original_connect = CassandraStore.connect

    async def counting_connect(*args: Any, **kwargs: Any) -> CassandraStore:
        counted = await original_connect(*args, **kwargs)
        _count_calls(counted, counts)
        return counted

    CassandraStore.connect = counting_connect  # type: ignore[method-assign]
    try:
        await worker.start()
    finally:
        CassandraStore.connect = original_connect  # type: ignore[method-assign]
    producer = KafkaProducer(local.kafka)
    await asyncio.gather(*(producer.send(topic_names(prefix)["default"], encode(d)) for d in dues))
    await producer.close()
    await wait_done(store, dues, timeout_s=120)
    await worker.stop()
    await store.close()
    return counts


def _count_calls(store: CassandraStore, counts: Counter[str]) -> None:
    execute, batch = store.execute, store.batch

    async def counted_execute(cql: str, *args: Any, **kwargs: Any) -> Any:
        counts["lwt" if " IF " in cql else cql.split()[0].lower()] += 1
        return await execute(cql, *args, **kwargs)

    async def counted_batch(*args: Any, **kwargs: Any) -> Any:
        counts["batch"] += 1
        return await batch(*args, **kwargs)

    store.execute = counted_execute  # type: ignore[method-assign]
    store.batch = counted_batch  # type: ignore[method-assign]


async def main(count: int) -> None:
    os.environ.setdefault("TICKWHEEL_ENV_FILE", str(ROOT / ".stack" / "env"))
    settings = Settings.from_env()
    settings = dataclasses.replace(
        settings, cassandra=dataclasses.replace(settings.cassandra, keyspace=OVERRIDES["TICKWHEEL_CASSANDRA_KEYSPACE"])
    )
    await run_migrate(settings)
    store = await CassandraStore.connect(settings.cassandra)
    async with Sink() as sink:
        for delay_ms in (5, 200):
            rate = await timed_pass(settings, store, sink, delay_ms, count)
            print(f"sink answering in {delay_ms} ms: {count} runs, {rate:.0f} runs/s (one worker process)")
        small = min(count, 200)
        counts = await count_statements(settings, sink, small)
        per_run = {k: round(v / small, 2) for k, v in sorted(counts.items())}
        print(f"Cassandra statements per run ({small} runs): {sum(counts.values()) / small:.2f} total, {per_run}")
    await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=600)
    asyncio.run(main(parser.parse_args().runs))
