"""One lane's consumer: polls the lane topic, keeps up to the lane's reserved concurrency of runs in flight,
and commits offsets only below the oldest message still in flight.

Fair share between tenants: the consumer reads up to `fair_share_readahead` messages beyond its free slots into a
weighted deficit-round-robin queue keyed by tenant (`tickwheel.core.fairshare`, weights from the tenant record),
and starts runs in that order, so a small tenant's runs start within a round of arriving however large another
tenant's backlog ahead of them in the topic. A message waiting in the queue counts as in flight for the offsets
(it is not committed until handled); a worker that dies hands it back like any unfinished run. A readahead of 0
turns fair share off: runs start in arrival order.

Each lane has its own consumer and its own capacity, so urgent runs never wait behind a bulk backlog. On stop it
polls no more, lets what it holds finish (up to `shutdown_grace_s`), cancels the rest (the handler hands those
runs back) and commits what was finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec

from schemas.messages import DueRun, Lane, decode_due_run, topic_names, worker_group
from tickwheel import metrics
from tickwheel.bus.kafka import KafkaConsumer, Record
from tickwheel.core.fairshare import FairQueue
from tickwheel.errors import TickwheelError
from tickwheel.settings import Settings
from worker.offsets import OffsetTracker

log = logging.getLogger(__name__)

Handler = Callable[[DueRun], Awaitable[None]]
WeightOf = Callable[[str], int]
RETRIES = 5  # a server that does not answer: try the message again a few times before leaving it to re-firing
POLL_TIMEOUT_S = 0.25
POLL_BATCH = 2000  # messages per poll at most: fewer hops to the consumer's thread while a backlog is read


def lane_fetch(settings: Settings, lane: Lane) -> tuple[int, int]:
    """The lane consumer's fetch wait (ms) and minimum bytes: the urgent and bulk lanes' own, the default lane the
    consumers' (`kafka.fetch_*`)."""
    if lane == "urgent":
        return settings.worker.urgent_fetch_wait_ms, settings.worker.urgent_fetch_min_bytes
    if lane == "bulk":
        return settings.worker.bulk_fetch_wait_ms, settings.kafka.fetch_min_bytes
    return settings.kafka.fetch_wait_ms, settings.kafka.fetch_min_bytes


class LaneConsumer:
    def __init__(
        self,
        settings: Settings,
        lane: Lane,
        handle: Handler,
        weight_of: WeightOf = lambda _: 1,
        *,
        session_s: float | None = None,
    ):
        self.settings = settings
        self.lane = lane
        self.handle = handle
        prefix = settings.kafka.topic_prefix
        self.topic = topic_names(prefix)[lane]
        self.group = worker_group(prefix, lane)
        self.capacity: int = getattr(settings.worker, f"concurrency_{lane}")
        self.readahead = settings.worker.fair_share_readahead
        # Fair share off: one key for every tenant, so the queue is first in, first out.
        self._key_of: Callable[[DueRun], str] = (lambda due: due.tenant_id) if self.readahead > 0 else (lambda _: "")
        self.waiting: FairQueue[str, tuple[Record, DueRun]] = FairQueue(weight_of)
        self.tracker = OffsetTracker()
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_free = asyncio.Event()
        self._stopping = asyncio.Event()
        self.subscribed = asyncio.Event()
        # The group session (the worker passes `group_session_s` raised to the brokers' floor).
        self.session_s = session_s or settings.worker.group_session_s

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    async def run(self) -> None:
        session_ms = int(self.session_s * 1000)
        fetch_wait_ms, fetch_min_bytes = lane_fetch(self.settings, self.lane)
        consumer = KafkaConsumer(
            self.settings.kafka,
            group_id=self.group,
            fetch_wait_ms=fetch_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            extra={
                "max.poll.interval.ms": 600_000,
                "session.timeout.ms": session_ms,
                "heartbeat.interval.ms": max(100, min(3000, session_ms // 3)),
            },
        )
        await consumer.subscribe([self.topic])
        self.subscribed.set()
        try:
            await self._loop(consumer)
            await self._drain()
            await self._commit(consumer)
        finally:
            await consumer.close()

    async def _loop(self, consumer: KafkaConsumer) -> None:
        last_commit = time.monotonic()
        idle = False
        while not self._stopping.is_set():
            free = self.capacity - len(self._tasks)
            room = free + self.readahead - len(self.waiting)
            if room <= 0 or (free <= 0 and idle):
                self._slot_free.clear()
                await _wait(self._slot_free, POLL_TIMEOUT_S)
                idle = False
            else:
                # Every slot busy: look without blocking for what arrived (a late tenant's runs must reach the queue
                # while the slots work through a backlog), then wait for a slot.
                records = await consumer.poll(
                    min(room, POLL_BATCH), POLL_TIMEOUT_S if free > 0 else 0, self.settings.worker.lane_gather_s
                )
                for record in records:
                    self._enqueue(record)
                idle = not records
            self._start_waiting()
            if time.monotonic() - last_commit >= self.settings.worker.commit_interval_s:
                await self._commit(consumer)
                last_commit = time.monotonic()

    def _enqueue(self, record: Record) -> None:
        try:
            due = decode_due_run(record.value)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("undecodable message at %s/%s@%s dropped: %s", record.topic, record.partition, record.offset, exc)
            self.tracker.started(record.topic, record.partition, record.offset)
            self.tracker.finished(record.topic, record.partition, record.offset)
            return
        self.tracker.started(record.topic, record.partition, record.offset)
        self.waiting.push(self._key_of(due), (record, due))

    def _start_waiting(self) -> None:
        """Start waiting runs in fair order while slots are free."""
        while len(self._tasks) < self.capacity and (taken := self.waiting.pop()) is not None:
            self._start(*taken[1])
        metrics.child(metrics.fair_queue, self.lane).set(len(self.waiting))

    def _start(self, record: Record, due: DueRun) -> None:
        task = asyncio.create_task(self._process(due), name=f"run {record.topic}/{record.partition}@{record.offset}")
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, record))

    def _done(self, task: asyncio.Task[None], record: Record) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            # A cancelled task was handed back, not finished: its offset stays uncommitted.
            self.tracker.finished(record.topic, record.partition, record.offset)
        self._slot_free.set()

    async def _process(self, due: DueRun) -> None:
        for tries in range(1, RETRIES + 1):
            try:
                await self.handle(due)
                return
            except TickwheelError as exc:
                if not exc.retriable or tries == RETRIES:
                    log.error("run message given up after %s tries: %s", tries, exc.message, extra=_extra(due))
                    return
                await asyncio.sleep(0.2 * 2**tries)
            except Exception:
                log.exception("run message failed", extra=_extra(due))
                return

    async def _drain(self) -> None:
        if not self._tasks:
            return
        log.info("lane %s: finishing %s runs in flight", self.lane, len(self._tasks))
        _, pending = await asyncio.wait(set(self._tasks), timeout=self.settings.worker.shutdown_grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def _commit(self, consumer: KafkaConsumer) -> None:
        offsets = self.tracker.committable()
        if not offsets:
            return
        try:
            held = await consumer.assignment()
            for topic, partition, _ in offsets:
                if (topic, partition) not in held:  # taken away by a rebalance: its offsets are another member's
                    self.tracker.forget(topic, partition)
            offsets = [o for o in offsets if (o[0], o[1]) in held]
            if not offsets:
                return
            await consumer.commit(offsets)
            self.tracker.committed(offsets)
        except Exception as exc:  # a commit refused after a rebalance is harmless: claims make re-delivery safe
            log.warning("lane %s: offset commit failed: %s", self.lane, exc)


def _extra(due: DueRun) -> dict[str, object]:
    """A run message's ids for a log record (made only for a line that is written)."""
    return {"tenant": due.tenant_id, "job_id": str(due.job_id), "run_id": str(due.run_id), "attempt": due.attempt}


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
