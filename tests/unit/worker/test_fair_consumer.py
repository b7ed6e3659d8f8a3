"""The lane consumer's fair-share wiring without Kafka: consumed messages wait in a per-tenant queue and start in
weighted round robin as slots free; with no readahead they start in arrival order."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime

from schemas.messages import DueRun, encode
from tickwheel.bus.kafka import Record
from tickwheel.settings import build
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import Tenant
from worker import context
from worker.consumer import LaneConsumer


def message(tenant: str, offset: int) -> Record:
    at_ms = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp() * 1000)
    due = DueRun(
        run_id=uuid.uuid4(), job_id=uuid.uuid4(), tenant_id=tenant, shard=0, attempt=0, kind="run", lane="default",
        job_version=1, scheduled_at_ms=at_ms, fire_at_ms=at_ms,
    )  # fmt: skip
    return Record("t", 0, offset, None, encode(due), (), 0)


async def started_tenants(readahead: int, weights: dict[str, int], records: list[Record], slots: int) -> list[str]:
    settings = build({})
    settings = dataclasses.replace(
        settings,
        worker=dataclasses.replace(settings.worker, concurrency_default=slots, fair_share_readahead=readahead),
    )
    started: list[str] = []
    gate = asyncio.Event()

    async def handle(due: DueRun) -> None:
        started.append(due.tenant_id)
        await gate.wait()

    consumer = LaneConsumer(settings, "default", handle, lambda tenant: weights.get(tenant, 1))
    for record in records:
        consumer._enqueue(record)
    while len(consumer.waiting):
        consumer._start_waiting()
        await asyncio.sleep(0)
        gate.set()
        await asyncio.sleep(0)
        gate.clear()
    await asyncio.sleep(0)
    return started


async def test_consumed_runs_start_in_weighted_round_robin_between_tenants() -> None:
    records = [message("A", n) for n in range(40)] + [message("B", 40 + n) for n in range(5)]
    order = await started_tenants(1000, {"A": 2}, records, slots=3)
    assert order[:9] == ["A", "A", "B"] * 3 and sorted(order) == ["A"] * 40 + ["B"] * 5


async def test_without_readahead_runs_start_in_arrival_order() -> None:
    records = [message("A", n) for n in range(40)] + [message("B", 40 + n) for n in range(5)]
    assert await started_tenants(0, {}, records, slots=3) == ["A"] * 40 + ["B"] * 5


async def test_a_waiting_message_holds_its_offset_back_until_handled() -> None:
    settings = build({})
    consumer = LaneConsumer(settings, "default", lambda due: asyncio.sleep(0))
    consumer._enqueue(message("A", 7))
    assert consumer.tracker.committable() == [("t", 0, 7)]
    consumer._start_waiting()
    await asyncio.sleep(0.01)
    assert consumer.tracker.committable() == [("t", 0, 8)]


async def test_an_undecodable_message_is_dropped_and_its_offset_passed() -> None:
    consumer = LaneConsumer(build({}), "default", lambda due: asyncio.sleep(0))
    consumer._enqueue(Record("t", 0, 3, None, b"not a run", (), 0))
    assert len(consumer.waiting) == 0 and consumer.tracker.committable() == [("t", 0, 4)]


async def test_a_tenants_weight_comes_from_its_record_once_read() -> None:
    reads: list[str] = []

    class CountedStore(MemoryStore):
        async def call_settings(self, tenant_id: str) -> Tenant:
            reads.append(tenant_id)
            return await super().call_settings(tenant_id)

    store = CountedStore()
    store.tenants["big"] = Tenant("big", "big", None, (), weight=3)
    tenants = context.TenantCache(store)
    assert tenants.weight_of("big") == 1, "not read yet: the default, without waiting"
    await asyncio.sleep(0.01)
    assert (tenants.weight_of("big"), tenants.weight_of("small")) == (3, 1)
    await asyncio.sleep(0.01)
    assert tenants.weight_of("small") == 1 and reads == ["big", "small"]


async def test_a_lane_poll_gathers_a_burst_for_the_configured_time() -> None:
    """`worker.lane_gather_s` is how long a poll that waited for its first message waits for the rest (the runs of
    one poll are handled in step: their job reads and batches leave as one request each)."""
    settings = build({"TICKWHEEL_WORKER_LANE_GATHER_S": "0.02"})
    lane = LaneConsumer(settings, "default", lambda due: asyncio.sleep(0))
    polls: list[tuple[int, float, float]] = []

    class Consumer:
        async def poll(self, max_records: int = 500, timeout_s: float = 0.5, gather_s: float = 0.005) -> list[Record]:
            polls.append((max_records, timeout_s, gather_s))
            lane.stop()
            return []

    await lane._loop(Consumer())  # type: ignore[arg-type]
    assert polls and polls[0][2] == 0.02
