"""Driving the worker without the dispatcher: each test writes its tenant, jobs and runs, and a small firing loop
(`Firer`) produces every `runs_by_bucket` row of the test's tenant that is due onto the lane topic, as the
dispatcher would. Each test has its own topic prefix (so its own consumer groups), Redis prefix and sink."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas.messages import (
    DueRun,
    HttpTarget,
    JobDefinition,
    KafkaTarget,
    Lane,
    NotifyDoc,
    RetryDoc,
    ScheduleDoc,
    encode,
    topic_names,
)
from tickwheel.bus.kafka import KafkaProducer, delete_topics, ensure_topics
from tickwheel.core.ids import minute_bucket, run_id_for, shard_of
from tickwheel.dev.sink import WAIT_S, Sink  # WAIT_S: the waits' default deadline here too
from tickwheel.settings import Settings
from tickwheel.signing import generate_secret
from tickwheel.store import buckets, runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import Run
from tickwheel.store.runs import NewRun
from worker.main import Worker

FAST_RETRY = RetryDoc(max_attempts=3, base_delay_s=0.2, max_delay_s=1.0, jitter=0.0)


def now_utc() -> datetime:
    return datetime.now(UTC)


@dataclass
class Firer:
    """Fires the test tenant's due bucket rows (first attempts, retries, deferrals, lease checks) once each."""

    store: CassandraStore
    producer: KafkaProducer
    settings: Settings
    tenant: str
    shards: set[int] = field(default_factory=set)
    fired: list[DueRun] = field(default_factory=list)
    _seen: set[tuple[Any, ...]] = field(default_factory=set)
    _since: datetime = field(default_factory=lambda: now_utc() - timedelta(minutes=1))

    async def fire_due(self) -> int:
        count = 0
        now = now_utc()
        bucket = minute_bucket(self._since)
        while bucket <= now:
            for shard in sorted(self.shards):
                rows = await self.store.execute(
                    "SELECT * FROM runs_by_bucket WHERE bucket = ? AND shard = ? AND fire_at <= ?", [bucket, shard, now]
                )
                for row in rows:
                    count += await self._fire(row)
            bucket += timedelta(minutes=1)
        return count

    async def _fire(self, row: dict[str, Any]) -> int:
        key = (row["run_id"], row["attempt"], row["kind"], row["fire_at"])
        if row["tenant_id"] != self.tenant or key in self._seen:
            return 0
        self._seen.add(key)
        due = due_of(row)
        await self.producer.send(topic_names(self.settings.kafka.topic_prefix)[due.lane], encode(due))
        self.fired.append(due)
        return 1

    async def loop(self, interval_s: float = 0.2) -> None:
        while True:
            await self.fire_due()
            await asyncio.sleep(interval_s)


def due_of(row: dict[str, Any]) -> DueRun:
    """A bucket row as the dispatcher would fire it (the store's one translation)."""
    return buckets.due_run_of(row, row["shard"])


@dataclass
class Scene:
    """One test's world: settings, store, sink, producer, firer, and helpers to write tenants and jobs."""

    settings: Settings
    store: CassandraStore
    sink: Sink
    producer: KafkaProducer
    firer: Firer
    tenant: str
    secrets: list[str]
    workers: list[Worker] = field(default_factory=list)

    async def job(
        self,
        target: HttpTarget | KafkaTarget,
        *,
        payload: str = '{"hello": "world"}',
        retry: RetryDoc = FAST_RETRY,
        alert_url: str | None = None,
        state: str = "ACTIVE",
        at: datetime | None = None,
        lane: Lane = "default",
        notify: NotifyDoc | None = None,
        **definition_fields: Any,
    ) -> NewRun:
        """Write an ACTIVE job and its run due `at` (default now); the firer will fire it. `definition_fields` are
        further JobDefinition fields (name, payload_template, ...)."""
        job_id = uuid.uuid4()
        scheduled_at = (at or now_utc()).replace(microsecond=(at or now_utc()).microsecond // 1000 * 1000)
        definition = JobDefinition(
            schedule=ScheduleDoc(type="once", run_at=scheduled_at.isoformat()),
            target=target,
            payload=payload,
            retry_policy=retry,
            alert_url=alert_url,
            priority=lane,
            notify=notify,
            **definition_fields,
        )
        shard = shard_of(job_id, self.settings.shards)
        await self.store.execute(
            "INSERT INTO jobs (job_id, tenant_id, shard, state, version, definition, lane, created_at)"
            " VALUES (?, ?, ?, ?, 1, ?, ?, ?)",
            [job_id, self.tenant, shard, state, encode(definition).decode(), lane, now_utc()],
        )
        run = NewRun(
            run_id=run_id_for(job_id, scheduled_at),
            job_id=job_id,
            tenant_id=self.tenant,
            job_version=1,
            shard=shard,
            lane=lane,
            scheduled_at=scheduled_at,
            fire_at=scheduled_at,
        )
        await runs.create_run(self.store, run, now_utc())
        self.firer.shards.add(shard)
        return run

    async def worker(self, **worker_overrides: Any) -> Worker:
        settings = self.settings
        if worker_overrides:
            settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **worker_overrides))
        worker = await Worker(settings, redis_prefix=f"{self.tenant}:").start()
        self.workers.append(worker)
        return worker

    async def run_row(self, run_id: uuid.UUID) -> Run:
        run = await runs.get_run(self.store, run_id)
        assert run is not None
        return run

    async def wait_status(self, run_id: uuid.UUID, *statuses: str, timeout_s: float = WAIT_S) -> Run:
        run: Run = await eventually(lambda: self.run_row(run_id), lambda r: r.status in statuses, timeout_s)
        return run


async def eventually(
    read: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool], timeout_s: float = WAIT_S, every_s: float = 0.1
) -> Any:
    """Read until `ok(value)`; fails the test with the last value read."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    value = await read()
    while not ok(value):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s; last value: {value!r}")
        await asyncio.sleep(every_s)
        value = await read()
    return value


def scene_settings(settings: Settings, namespace: str) -> Settings:
    return dataclasses.replace(
        settings,
        kafka=dataclasses.replace(settings.kafka, topic_prefix=f"{namespace}.", lane_partitions=1),
        worker=dataclasses.replace(
            settings.worker,
            lanes=("default",),
            egress_allow=("127.0.0.1/32",),
            defer_s=0.3,
            commit_interval_s=0.2,
            shutdown_grace_s=2.0,
        ),
    )


@pytest.fixture
async def scene(settings: Settings, store: CassandraStore, namespace: str) -> AsyncIterator[Scene]:
    local = scene_settings(settings, namespace)
    lanes = topic_names(local.kafka.topic_prefix)
    await ensure_topics(
        local.kafka, {lanes["default"]: 1, lanes["urgent"]: 1, lanes["near"]: local.kafka.near_partitions}
    )
    secrets = [generate_secret()]
    await store.execute(
        "INSERT INTO tenants (tenant_id, name, signing_secrets, created_at) VALUES (?, ?, ?, ?)",
        [namespace, namespace, secrets, now_utc()],
    )
    producer = KafkaProducer(local.kafka)
    firer = Firer(store, producer, local, namespace)
    async with Sink() as sink:
        world = Scene(local, store, sink, producer, firer, namespace, secrets)
        firing = asyncio.create_task(firer.loop())
        try:
            yield world
        finally:
            firing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await firing
            for worker in world.workers:
                await worker.stop()
            await producer.close()
            await delete_topics(local.kafka, local.kafka.topic_prefix)
