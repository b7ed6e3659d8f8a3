"""The Kafka adapter: confluent-kafka producer (acks=all, idempotent), consumer and admin, bridged to asyncio.

The C client runs its own threads. The producer's delivery callbacks are served by one poll thread and resolve
asyncio futures; consumer calls run in a single-thread executor per consumer (a consumer is not thread-safe).
This module is the only place confluent-kafka is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewTopic

from tickwheel.errors import Unavailable
from tickwheel.settings import KafkaSettings

log = logging.getLogger(__name__)

OFFSET_BEGINNING = -2
OFFSET_END = -1
NO_DELAY = {"socket.nagle.disable": True}
"""The data plane's clients send a request as soon as it is written: librdkafka leaves Nagle's algorithm on, which holds
a request written while an earlier one is unacknowledged until the broker's delayed ACK (up to 40 ms)."""
GATHER_S = 0.005
"""How long a poll that waited for its first message waits for more, by default (`KafkaConsumer._consume`)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed message, copied out of the C client's object so it can cross threads and outlive the poll."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


class KafkaProducer:
    """An idempotent producer (acks=all); `send` returns once the broker acknowledged the message."""

    def __init__(self, settings: KafkaSettings, *, linger_ms: float | None = None, extra: dict[str, Any] | None = None):
        config = {
            "bootstrap.servers": settings.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": settings.linger_ms if linger_ms is None else linger_ms,
            "message.timeout.ms": int(settings.request_timeout_s * 1000),
            "socket.connection.setup.timeout.ms": 5000,
            **NO_DELAY,
        }
        self._producer = Producer({**config, **(extra or {})})
        self._timeout_s = settings.request_timeout_s
        self._closing = threading.Event()
        # Acknowledgements gathered during one poll, handed to their event loops in one hop each: a hop per
        # message wrote the loop's wake-up pipe once per run, a large share of a busy producer's CPU.
        self._settled: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[tuple[int, int]], Any, Any]] = []
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-producer-poll", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(0.05)
            self._hand_over()

    def _hand_over(self) -> None:
        """Pass the acknowledgements of the last poll (delivery callbacks run inside it, on this thread) to
        their loops: one `call_soon_threadsafe` per loop, however many messages were acknowledged."""
        if not self._settled:
            return
        settled, self._settled = self._settled, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[tuple[int, int]], Any, Any]]] = {}
        for loop, acked, err, msg in settled:
            by_loop.setdefault(loop, []).append((acked, err, msg))
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile has nobody left to tell
                loop.call_soon_threadsafe(_settle_all, batch)

    async def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[int, int]:
        """Produce one message and wait for its acknowledgement; returns (partition, offset)."""
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[tuple[int, int]] = loop.create_future()

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            # Runs inside `poll` or `flush`; the poll thread hands these over after each poll.
            self._settled.append((loop, acked, err, msg))

        kwargs: dict[str, Any] = {"key": key, "headers": list(headers), "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, value, **kwargs)
        except BufferError as exc:
            raise Unavailable("Kafka producer queue is full") from exc
        except KafkaException as exc:
            raise Unavailable(f"Kafka refused the message: {exc}") from exc
        return await acked

    def send_soon(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        on_result: Callable[[str | None], None],
    ) -> None:
        """Produce one message without waiting for it: `on_result` gets None once the broker acknowledged it, else
        the reason it did not (on the poll thread, or at once on this one when the client refuses the message).
        Nothing crosses to an event loop: the loop neither waits for nor is woken by the acknowledgement."""

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            on_result(None if err is None else f"Kafka did not acknowledge: {err.str()}")

        kwargs: dict[str, Any] = {"key": key, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, value, **kwargs)
        except BufferError:
            on_result("Kafka producer queue is full")
        except KafkaException as exc:
            on_result(f"Kafka refused the message: {exc}")

    async def close(self) -> None:
        """Stop the poll thread, then deliver what is queued (at most the request timeout) and settle it."""
        self._closing.set()
        await asyncio.to_thread(self._poller.join)
        await asyncio.to_thread(self._producer.flush, self._timeout_s)
        self._hand_over()


def _settle_all(batch: list[tuple[asyncio.Future[tuple[int, int]], Any, Any]]) -> None:
    for acked, err, msg in batch:
        _settle(acked, err, msg)


def _settle(acked: asyncio.Future[tuple[int, int]], err: KafkaError | None, msg: Message) -> None:
    if acked.done():
        return
    if err is not None:
        acked.set_exception(Unavailable(f"Kafka did not acknowledge: {err.str()}"))
    else:
        partition, offset = msg.partition(), msg.offset()
        # A delivered message always has both; the C client types them optional for undelivered ones.
        assert partition is not None and offset is not None
        acked.set_result((partition, offset))


class KafkaConsumer:
    """A consumer used either with a group (subscribe) or by manual assignment (assign, positioned); its fetches
    wait `fetch_wait_ms` for `fetch_min_bytes` (the settings' unless given)."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group_id: str | None = None,
        fetch_wait_ms: int | None = None,
        fetch_min_bytes: int | None = None,
        extra: dict[str, Any] | None = None,
    ):
        config = {
            "bootstrap.servers": settings.bootstrap,
            "group.id": group_id or "tickwheel-unassigned",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": settings.fetch_wait_ms if fetch_wait_ms is None else fetch_wait_ms,
            "fetch.min.bytes": settings.fetch_min_bytes if fetch_min_bytes is None else fetch_min_bytes,
            **NO_DELAY,
        }
        self._consumer = Consumer({**config, **(extra or {})})
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-consumer")
        self._offsets_config = {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "tickwheel-offsets",
            "enable.auto.commit": False,
        }
        self._offsets: Consumer | None = None
        """A consumer of its own for offset queries, made on first use (`end_offsets`)."""
        self._offsets_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-offsets")

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def subscribe(self, topics: Sequence[str]) -> None:
        """Join the consumer group on `topics`; the group assigns the partitions and moves them on rebalances."""
        await self._run(self._consumer.subscribe, list(topics))

    async def assign(self, assignments: Iterable[tuple[str, int, int]]) -> None:
        """Assign (topic, partition, offset) manually; offset may be OFFSET_BEGINNING or OFFSET_END."""
        await self._run(self._consumer.assign, [TopicPartition(t, p, o) for t, p, o in assignments])

    async def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The next offset to be written in each partition (the high watermark). Asked on a consumer that fetches
        nothing: a broker answers a connection's requests in order, so on one with partitions assigned each query
        waited behind the fetch long-poll (`fetch.wait.max.ms`, librdkafka's 500 ms then), 2 s for the four
        near-term partitions of a take-over (the dispatcher reads them before its first read of the shards)."""

        def read(consumer: Consumer) -> dict[int, int]:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}

        def read_aside() -> dict[int, int]:
            if self._offsets is None:
                self._offsets = Consumer(self._offsets_config)
            try:
                return read(self._offsets)
            except KafkaException:
                # Its metadata may be stale: after a broker's restart moved the partitions' leaders it answered "Not
                # leader for partition" for minutes (it fetches nothing, so nothing refreshed it) and a take-over
                # retried in vain (BENCHMARKS.md "Nemesis soak, run 8"). The next query makes a fresh one.
                stale, self._offsets = self._offsets, None
                stale.close()
                raise

        loop = asyncio.get_running_loop()
        try:
            ends: dict[int, int] = await loop.run_in_executor(self._offsets_thread, read_aside)
        except KafkaException as exc:
            log.warning("offsets consumer failed (%s); asking the fetching consumer instead", exc)
            try:  # slower (behind its fetch long-poll) but with the metadata its fetches keep fresh
                ends = await self._run(read, self._consumer)
            except KafkaException as again:
                raise Unavailable(f"Kafka did not report offsets: {again}") from again
        return ends

    async def poll(self, max_records: int = 500, timeout_s: float = 0.5, gather_s: float = GATHER_S) -> list[Record]:
        """Up to `max_records` messages, waiting at most `timeout_s` for the first; error events are logged, not
        returned. Returns once a message is there (plus `gather_s` for the rest of a burst), not at the timeout."""
        messages = await self._run(self._consume, max_records, timeout_s, gather_s)
        records = []
        for msg in messages:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("kafka consume error: %s", msg.error())
                continue
            records.append(_record(msg))
        return records

    def _consume(self, max_records: int, timeout_s: float, gather_s: float) -> list[Message]:
        """On the consumer's thread. The C client's `consume(n, timeout)` returns only when it has n messages or
        the timeout has passed: a lane consumer polling for hundreds with a 0.25 s timeout held each run up to
        0.25 s (half of it on average) before starting it. So: what is there now; else wait for one; then
        `gather_s` for the rest of a burst (one hop to the event loop per few messages at a few hundred a second)."""
        consume = self._consumer.consume
        messages = consume(max_records, 0)
        if messages or timeout_s <= 0:
            return messages
        messages = consume(1, timeout_s)
        if messages and max_records > 1:
            messages += consume(max_records - 1, gather_s)
        return messages

    async def assignment(self) -> set[tuple[str, int]]:
        """The (topic, partition) pairs this consumer holds now (a group member's change on rebalances)."""
        partitions = await self._run(self._consumer.assignment)
        return {(tp.topic, tp.partition) for tp in partitions}

    async def commit(self, offsets: Iterable[tuple[str, int, int]]) -> None:
        """Commit (topic, partition, next offset to read) synchronously."""
        partitions = [TopicPartition(t, p, o) for t, p, o in offsets]
        if partitions:
            await self._run(lambda: self._consumer.commit(offsets=partitions, asynchronous=False))

    async def close(self) -> None:
        """Close the consumer (a group member leaves, so its partitions move at once) and stop its thread."""
        await self._run(self._consumer.close)
        self._thread.shutdown(wait=True)
        offsets, self._offsets = self._offsets, None
        if offsets is not None:
            await asyncio.get_running_loop().run_in_executor(self._offsets_thread, offsets.close)
        self._offsets_thread.shutdown(wait=True)


def _record(msg: Message) -> Record:
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    # A consumed message (not an error event) always has its position.
    assert topic is not None and partition is not None and offset is not None
    return Record(
        topic=topic,
        partition=partition,
        offset=offset,
        key=msg.key(),
        value=msg.value() or b"",
        headers=_headers(msg),
        timestamp_ms=msg.timestamp()[1],
    )


async def ensure_topics(settings: KafkaSettings, partitions: dict[str, int]) -> list[str]:
    """Create missing topics with the given partition counts; returns the names created now."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    try:
        metadata = await asyncio.to_thread(admin.list_topics, timeout=settings.request_timeout_s)
    except KafkaException as exc:
        raise Unavailable(f"Kafka at {settings.bootstrap} is unavailable: {exc}") from exc
    missing = [name for name in partitions if name not in metadata.topics]
    if not missing:
        return []
    new = [NewTopic(n, num_partitions=partitions[n], replication_factor=settings.replication_factor) for n in missing]
    futures = admin.create_topics(new, operation_timeout=settings.request_timeout_s)
    for name, future in futures.items():
        try:
            await asyncio.wrap_future(future)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise Unavailable(f"could not create topic {name}: {exc}") from exc
    return missing


async def delete_topics(settings: KafkaSettings, prefix: str) -> list[str]:
    """Delete every topic named `prefix…` (a test's or a benchmark's own: left behind, thousands of them made a
    broker restart take 95 s); returns the names. Refuses an empty prefix, which would name every topic."""
    if not prefix:
        raise ValueError("delete_topics needs a non-empty prefix")
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    try:
        metadata = await asyncio.to_thread(admin.list_topics, timeout=settings.request_timeout_s)
    except KafkaException as exc:
        raise Unavailable(f"Kafka at {settings.bootstrap} is unavailable: {exc}") from exc
    doomed = sorted(name for name in metadata.topics if name.startswith(prefix))
    if doomed:
        futures = admin.delete_topics(doomed, operation_timeout=settings.request_timeout_s)
        for future in futures.values():
            with contextlib.suppress(KafkaException):  # already gone: deleted by a parallel teardown
                await asyncio.wrap_future(future)
    return doomed


async def partitions_of(settings: KafkaSettings, topic: str) -> int:
    """How many partitions `topic` has, read from the cluster's metadata (the count a consumer must cover)."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    try:
        metadata = await asyncio.to_thread(admin.list_topics, topic, timeout=settings.request_timeout_s)
    except KafkaException as exc:
        raise Unavailable(f"Kafka at {settings.bootstrap} is unavailable: {exc}") from exc
    return len(metadata.topics[topic].partitions)


def _headers(msg: Message) -> tuple[tuple[str, bytes], ...]:
    """The message's headers as (name, value) pairs; a header without a value reads as empty bytes."""
    raw = msg.headers() or ()
    pairs = raw.items() if isinstance(raw, dict) else raw
    return tuple((name, value.encode() if isinstance(value, str) else value or b"") for name, value in pairs)


async def consumer_lag(settings: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    """Messages in each partition of `topic` that consumer group `group` has not committed yet (a partition the
    group never committed counts from the oldest message kept). Reads offsets only; joins no group."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": group, "enable.auto.commit": False})
    timeout = settings.request_timeout_s

    def read() -> dict[int, int]:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = [TopicPartition(topic, p) for p in sorted(metadata.topics[topic].partitions)]
        lag = {}
        for committed in consumer.committed(partitions, timeout=timeout):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, committed.partition), timeout=timeout)
            lag[committed.partition] = max(0, high - (committed.offset if committed.offset >= 0 else low))
        return lag

    try:
        return await asyncio.to_thread(read)
    except KafkaException as exc:
        raise Unavailable(f"Kafka did not report the offsets of {group} on {topic}: {exc}") from exc
    finally:
        await asyncio.to_thread(consumer.close)


BROKER_SESSION_FLOOR = "group.min.session.timeout.ms"
BROKER_DEFAULT_SESSION_FLOOR_S = 6.0  # Kafka's default for group.min.session.timeout.ms


async def group_session_floor_s(settings: KafkaSettings) -> float:
    """The shortest consumer-group session the brokers accept (`group.min.session.timeout.ms`, read from one
    broker): a consumer asking for less is refused when it joins. Kafka's default (6 s) when it cannot be read."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    try:
        metadata = await asyncio.to_thread(admin.list_topics, timeout=settings.request_timeout_s)
        broker = ConfigResource(ConfigResource.Type.BROKER, str(next(iter(metadata.brokers))))
        [future] = admin.describe_configs([broker], request_timeout=settings.request_timeout_s).values()
        configs = await asyncio.wrap_future(future)
        return int(configs[BROKER_SESSION_FLOOR].value) / 1000
    except (KafkaException, StopIteration, KeyError, ValueError, TypeError) as exc:
        log.warning("could not read the brokers' %s (%s): assuming Kafka's default", BROKER_SESSION_FLOOR, exc)
        return BROKER_DEFAULT_SESSION_FLOOR_S
