"""Dispatcher benchmark: preload time and memory for a minute holding N runs, fires per second one dispatcher
sustains onto a lane topic, and the fire lag (fired_at - fire_at) p50/p99.

    .venv/bin/python -m benchmarks.dispatch_bench --preload 100000 --fires 20000

Uses its own keyspace (tw_bench_dispatch) and topic prefix on the local stack, 1024 shards. The engine runs
in-process without ZooKeeper (ownership is set directly), so the figures are the data path only:
1. writes N bucket rows into one minute beyond the horizon, spread over 1024 shards (unlogged batches per
   partition; not timed);
2. preload: reads that minute for all 1024 shards (paged, 32 partitions in flight) and inserts it into the
   wheel; timed, and memory per run measured with tracemalloc on a second read;
3. fire: puts `--fires` rows due within one second in the wheel (attempt 1: no chaining) plus `--chained`
   first-attempt rows (each reads its job row to chain), lets the fire loop send them, then reads the lane topic
   back for fired_at - fire_at.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import statistics
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta

from dispatcher.engine import Dispatcher, ShardState
from dispatcher.nearfeed import NearFeed
from schemas.messages import DueRun, decode_due_run, topic_names
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, KafkaProducer
from tickwheel.commands import run_migrate
from tickwheel.core.ids import epoch_ms, shard_of
from tickwheel.dev.platform import local_settings
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import INSERT_BUCKET
from tickwheel.store.tables import CassandraTables

SHARDS = 1024


def bench_settings(prefix: str, fire_concurrency: int) -> Settings:
    base = local_settings()
    return dataclasses.replace(
        base,
        shards=SHARDS,
        dispatcher=dataclasses.replace(base.dispatcher, fire_concurrency=fire_concurrency),
        cassandra=dataclasses.replace(base.cassandra, keyspace="tw_bench_dispatch"),
        kafka=dataclasses.replace(base.kafka, topic_prefix=prefix, lane_partitions=4, near_partitions=4),
    )


async def write_minute(store: CassandraStore, minute: datetime, count: int) -> None:
    per_shard: dict[int, list[tuple[str, list[object]]]] = {}
    naive = minute.replace(tzinfo=None)
    for i in range(count):
        job_id = uuid.uuid4()
        shard = shard_of(job_id, SHARDS)
        at = naive + timedelta(milliseconds=(i * 60_000) // count)
        row = [naive, shard, at, uuid.uuid4(), 0, "run", job_id, "bench", "bulk", 1, at, 0]
        per_shard.setdefault(shard, []).append((INSERT_BUCKET, row))
    gate = asyncio.Semaphore(16)

    async def one(rows: list[tuple[str, list[object]]]) -> None:
        async with gate:
            for start in range(0, len(rows), 100):
                await store.batch(rows[start : start + 100], logged=False)

    await asyncio.gather(*(one(rows) for rows in per_shard.values()))


def engine_for(settings: Settings, store: CassandraStore, producer: KafkaProducer) -> Dispatcher:
    near = NearFeed(settings, KafkaConsumer(settings.kafka))
    engine = Dispatcher(settings, CassandraTables(store), producer, near, name="bench")
    engine.ownership.member = "bench"
    engine.confirm_alive()
    return engine


async def preload(engine: Dispatcher, minute: datetime) -> tuple[float, int]:
    engine.table.owned = {s: ShardState(start=minute, scanned=True) for s in range(SHARDS)}
    started = time.perf_counter()
    runs = await engine.horizon.read({s: minute for s in range(SHARDS)}, minute + timedelta(minutes=1))
    engine.table.insert_all(runs)
    return time.perf_counter() - started, len(runs)


async def memory_per_run(settings: Settings, store: CassandraStore, producer: KafkaProducer, minute: datetime) -> float:
    engine = engine_for(settings, store, producer)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _, count = await preload(engine, minute)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / max(1, count)


def due_rows(count: int, first_ms: int, window_ms: int, attempt: int) -> list[DueRun]:
    rows = []
    for i in range(count):
        job_id = uuid.uuid4()
        at = first_ms + (i * window_ms) // max(1, count)
        rows.append(
            DueRun(
                run_id=uuid.uuid4(),
                job_id=job_id,
                tenant_id="bench",
                shard=shard_of(job_id, SHARDS),
                attempt=attempt,
                kind="run",
                lane="default",
                job_version=1,
                scheduled_at_ms=at,
                fire_at_ms=at,
            )
        )
    return rows


async def fire(engine: Dispatcher, rows: list[DueRun]) -> float:
    engine.table.owned = {s: ShardState(start=datetime.now(UTC), scanned=True) for s in range(SHARDS)}
    engine.table.loaded_until = datetime.now(UTC) + timedelta(minutes=2)
    engine.table.insert_all(rows)
    first_due = min(r.fire_at_ms for r in rows)
    task = asyncio.get_running_loop().create_task(engine.firing.loop())
    target = engine.firing.fired_count + len(rows)
    while engine.firing.fired_count < target:
        engine.confirm_alive()  # no ZooKeeper here: stand in for the membership's liveness probe
        await asyncio.sleep(0.01)
    elapsed = time.time() - first_due / 1000
    task.cancel()
    return elapsed


async def read_lags(settings: Settings, ids: set[uuid.UUID]) -> list[int]:
    consumer = KafkaConsumer(settings.kafka)
    topic = topic_names(settings.kafka.topic_prefix)["default"]
    await consumer.assign([(topic, p, OFFSET_BEGINNING) for p in range(settings.kafka.lane_partitions)])
    lags: dict[uuid.UUID, int] = {}
    idle = 0
    while len(lags) < len(ids) and idle < 20:
        records = await consumer.poll(5000, 0.5)
        idle = 0 if records else idle + 1
        for record in records:
            run = decode_due_run(record.value)
            if run.run_id in ids:
                lags.setdefault(run.run_id, run.fired_at_ms - run.fire_at_ms)
    await consumer.close()
    return sorted(lags.values())


def pct(values: list[int], q: float) -> int:
    return values[min(len(values) - 1, int(q * len(values)))] if values else -1


async def main(args: argparse.Namespace) -> None:
    settings = bench_settings(f"bench{uuid.uuid4().hex[:6]}.", args.concurrency)
    print(f"fire concurrency {args.concurrency} sends in flight")
    await run_migrate(settings)
    store = await CassandraStore.connect(settings.cassandra)
    producer = KafkaProducer(settings.kafka, linger_ms=2)
    # a minute no earlier pass used (the keyspace is dropped at the end, but a killed pass leaves rows)
    minute = (datetime.now(UTC) + timedelta(minutes=10 + int(time.time()) % 10_000)).replace(second=0, microsecond=0)
    started = time.perf_counter()
    await write_minute(store, minute, args.preload)
    print(f"wrote {args.preload} bucket rows in {time.perf_counter() - started:.1f} s (not part of the figures)")
    engine = engine_for(settings, store, producer)
    seconds, count = await preload(engine, minute)
    print(
        f"preload: {count} runs of one minute over {SHARDS} shards in {seconds:.2f} s ({count / seconds:,.0f} rows/s)"
    )
    del engine
    per_run = await memory_per_run(settings, store, producer, minute)
    print(f"memory: {per_run:.0f} bytes per preloaded run (tracemalloc: DueRun + key + wheel slot + indexes)")
    for label, n, attempt in (("no chaining", args.fires, 1), ("chaining (job row read)", args.chained, 0)):
        if n <= 0:
            continue
        engine = engine_for(settings, store, producer)
        rows = due_rows(n, epoch_ms(datetime.now(UTC)) + 1500, 1000, attempt)
        elapsed = await fire(engine, rows)
        lags = await read_lags(settings, {r.run_id for r in rows})
        print(
            f"fire ({label}): {n} runs due within 1 s, all acked {elapsed:.2f} s after the first was due:"
            f" {n / elapsed:,.0f} fires/s; lag p50 {pct(lags, 0.5)} ms, p99 {pct(lags, 0.99)} ms,"
            f" max {lags[-1] if lags else -1} ms ({len(lags)} read back)"
        )
        print(f"  mean lag {statistics.mean(lags):.0f} ms" if lags else "")
    await producer.close()
    await store.execute_raw(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}")
    await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preload", type=int, default=100_000)
    parser.add_argument("--fires", type=int, default=20_000)
    parser.add_argument("--chained", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=Settings().dispatcher.fire_concurrency)
    asyncio.run(main(parser.parse_args()))
