"""Dispatch tests: each test gets its own ZooKeeper chroot and Kafka topics, 64 shards, short intervals, and a
clean shard_checkpoints table (epochs restart with every test's coordinator)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import coordinator.main as coordinator_main
import dispatcher.main as dispatcher_main
from schemas.messages import LANES, DueRun, HttpTarget, JobDefinition, ScheduleDoc, decode_due_run, encode, topic_names
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, KafkaProducer, delete_topics, ensure_topics
from tickwheel.bus.near import announce
from tickwheel.commands import platform_topics
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import NewRun, create_run

SHARDS = 64


@pytest.fixture
async def dsettings(settings: Settings, store: CassandraStore, namespace: str) -> AsyncIterator[Settings]:
    s = dataclasses.replace(
        settings,
        shards=SHARDS,
        kafka=dataclasses.replace(settings.kafka, topic_prefix=f"{settings.kafka.topic_prefix}{namespace}."),
        zookeeper=dataclasses.replace(settings.zookeeper, chroot=f"/tw-test/{namespace}", session_timeout_s=4.0),
        dispatcher=dataclasses.replace(
            settings.dispatcher,
            port=0,
            scan_interval_s=1.0,
            rescan_interval_s=3600.0,
            checkpoint_interval_s=0.5,
            checkpoint_step_s=0.5,
            resume_grace_s=30,
            liveness_interval_s=0.5,
        ),
        coordinator=dataclasses.replace(
            settings.coordinator, port=0, sweep_interval_s=3600.0, forecast_interval_s=3600.0, sweep_grace_s=5
        ),
    )
    await ensure_topics(s.kafka, platform_topics(s))
    await store.execute("DELETE FROM shard_checkpoints WHERE shard IN ?", [list(range(SHARDS))])
    yield s
    await delete_topics(s.kafka, s.kafka.topic_prefix)


Cluster = Callable[..., Awaitable[list[dispatcher_main.Running]]]


@pytest.fixture
async def cluster(dsettings: Settings, store: CassandraStore) -> AsyncIterator[Cluster]:
    """start(n, **dispatcher setting overrides) -> n dispatchers beside one coordinator, all stopped after."""
    started: list[dispatcher_main.Running | coordinator_main.Running] = []

    async def start(n: int = 1, **overrides: Any) -> list[dispatcher_main.Running]:
        s = dataclasses.replace(dsettings, dispatcher=dataclasses.replace(dsettings.dispatcher, **overrides))
        if not any(isinstance(r, coordinator_main.Running) for r in started):
            started.append(await coordinator_main.start(s, store=store, name="coord-a"))
        dispatchers = []
        for i in range(n):
            running = await dispatcher_main.start(s, store=store, name=f"disp-{len(started)}-{i}")
            started.append(running)
            dispatchers.append(running)
        return dispatchers

    yield start
    for running in reversed(started):
        await running.stop()


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0, step_s: float = 0.1) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(step_s)


def covered(dispatchers: list[dispatcher_main.Running]) -> bool:
    """Every shard owned by exactly one dispatcher and scanned."""
    owned = [s for d in dispatchers for s, st in d.engine.table.owned.items() if st.scanned]
    return sorted(owned) == list(range(SHARDS))


def new_run(
    job_id: uuid.UUID,
    at: datetime,
    *,
    lane: str = "default",
    tenant: str = "t",
    version: int = 1,
    tolerance_ms: int = 0,
) -> NewRun:
    return NewRun(
        run_id=run_id_for(job_id, at),
        job_id=job_id,
        tenant_id=tenant,
        job_version=version,
        shard=shard_of(job_id, SHARDS),
        lane=lane,
        scheduled_at=at,
        fire_at=at,
        tolerance_ms=tolerance_ms,
    )


async def write_run(store: CassandraStore, run: NewRun) -> NewRun:
    await create_run(store, run, datetime.now(UTC))
    return run


async def announce_run(s: Settings, producer: KafkaProducer, run: NewRun) -> None:
    topic = topic_names(s.kafka.topic_prefix)["near"]
    await announce(producer, topic, due_run_for(run), partitions=s.kafka.near_partitions, shards=s.shards)


class LaneReader:
    """Reads every lane topic of the test from the beginning; collects fired DueRuns with their headers."""

    def __init__(self, s: Settings):
        self.settings = s
        self.consumer = KafkaConsumer(s.kafka)
        self.fired: list[tuple[str, DueRun, dict[str, bytes]]] = []

    async def start(self) -> None:
        names = topic_names(self.settings.kafka.topic_prefix)
        parts = self.settings.kafka.lane_partitions
        await self.consumer.assign([(names[lane], p, OFFSET_BEGINNING) for lane in LANES for p in range(parts)])

    async def poll(self) -> None:
        for record in await self.consumer.poll(1000, 0.2):
            self.fired.append((record.topic, decode_due_run(record.value), dict(record.headers)))

    def runs(self, job_ids: set[uuid.UUID] | None = None) -> list[DueRun]:
        return [d for _, d, _ in self.fired if job_ids is None or d.job_id in job_ids]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"not fired in time; fired so far: {len(self.fired)}")
            await self.poll()

    async def close(self) -> None:
        await self.consumer.close()


@pytest.fixture
async def lanes(dsettings: Settings) -> AsyncIterator[LaneReader]:
    reader = LaneReader(dsettings)
    await reader.start()
    yield reader
    await reader.close()


@pytest.fixture
async def producer(dsettings: Settings) -> AsyncIterator[KafkaProducer]:
    p = KafkaProducer(dsettings.kafka)
    yield p
    await p.close()


INSERT_JOB = (
    "INSERT INTO jobs (job_id, tenant_id, shard, state, version, definition, lane, next_run_id, next_run_at,"
    " fired_count, created_at, updated_at) VALUES (?, ?, ?, 'ACTIVE', 1, ?, ?, ?, ?, 0, ?, ?)"
)


async def write_interval_job(
    store: CassandraStore, first_at: datetime, every_s: int, *, lane: str = "default", max_runs: int | None = None
) -> tuple[uuid.UUID, NewRun]:
    """An ACTIVE interval job anchored at `first_at` (version 1) and its first run, as the API writes them."""
    schedule = ScheduleDoc(type="interval", every_s=every_s, start_at=first_at.isoformat(), max_runs=max_runs)
    run = await write_job(store, schedule, first_at, lane=lane)
    return run.job_id, run


async def write_job(
    store: CassandraStore, schedule: ScheduleDoc, first_at: datetime, *, lane: str = "default"
) -> NewRun:
    """An ACTIVE job with `schedule` (version 1) and its first run at `first_at`, as the API writes them."""
    job_id = uuid.uuid4()
    definition = JobDefinition(schedule=schedule, target=HttpTarget(url="https://example.test/hook"), priority=lane)  # type: ignore[arg-type]
    run = new_run(job_id, first_at, lane=lane)
    now = datetime.now(UTC)
    await store.execute(
        INSERT_JOB,
        [job_id, "t", run.shard, encode(definition).decode(), lane, run.run_id, first_at, now, now],
    )
    await write_run(store, run)
    return run
