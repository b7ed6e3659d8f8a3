"""Smoke tests: each adapter proven on its real server."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from kazoo.client import KazooClient
from redis.exceptions import ResponseError

from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, KafkaProducer, ensure_topics
from tickwheel.coordination.zookeeper import SessionState, ZooKeeper
from tickwheel.flow.redis import REDIS_DOWN, RedisClient
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore

STACK_DIR = Path(__file__).resolve().parents[2] / ".stack"


async def test_a_row_written_at_quorum_is_read_back(store: CassandraStore, namespace: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    await store.execute("INSERT INTO tenants (tenant_id, name, created_at) VALUES (?, ?, ?)", [namespace, "smoke", now])
    rows = await store.execute("SELECT name, created_at FROM tenants WHERE tenant_id = ?", [namespace])
    assert rows == [{"name": "smoke", "created_at": now.replace(tzinfo=None)}]
    assert store.settings.consistency == "QUORUM"


async def test_a_process_prepares_its_statements_at_start_up(settings: Settings) -> None:
    from tickwheel.store import jobs, runs
    from tickwheel.store.cassandra import statements_of

    statements = statements_of(jobs, runs)
    hot = {runs.CLAIM, runs.FINISH, runs.INSERT_CALL_ATTEMPT, jobs.READ_STATE, jobs.READ_STATES, jobs.INSERT_KEYED_JOB}
    assert hot <= set(statements)
    store = await CassandraStore.connect(settings.cassandra)
    try:
        assert await store.prepare_all([*statements, "SELECT nothing FROM no_such_table"]) == len(statements)
        assert set(statements) <= set(store._prepared)
    finally:
        await store.close()


async def test_paging_returns_every_row_once_through_cursors(store: CassandraStore, namespace: str) -> None:
    for _ in range(7):
        await store.execute(
            "INSERT INTO jobs_by_tenant (tenant_id, job_id, state) VALUES (?, ?, 'ACTIVE')", [namespace, uuid.uuid4()]
        )
    seen, cursor, pages = [], None, 0
    while True:
        rows, cursor = await store.page(
            "SELECT job_id FROM jobs_by_tenant WHERE tenant_id = ?", [namespace], page_size=3, cursor=cursor
        )
        seen += [r["job_id"] for r in rows]
        pages += 1
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 7
    assert pages == 3


async def test_a_message_produced_with_acks_all_is_consumed(settings: Settings, namespace: str) -> None:
    topic = f"{namespace}.smoke"
    await ensure_topics(settings.kafka, {topic: 1})
    producer = KafkaProducer(settings.kafka)
    partition, offset = await producer.send(topic, b"hello", key=b"k", headers=[("run-id", b"r1")])
    await producer.close()
    consumer = KafkaConsumer(settings.kafka)
    await consumer.assign([(topic, partition, OFFSET_BEGINNING)])
    records = []
    for _ in range(20):
        records += await consumer.poll(10, 0.5)
        if records:
            break
    await consumer.close()
    assert [(r.value, r.key, r.offset, r.headers) for r in records] == [(b"hello", b"k", offset, (("run-id", b"r1"),))]


async def test_a_poll_returns_when_a_message_arrives_not_at_its_timeout(settings: Settings, namespace: str) -> None:
    """The C client's `consume(n, timeout)` waits for n messages or the timeout: a lane consumer asking for
    hundreds held each run up to its 0.25 s timeout before starting it."""
    topic = f"{namespace}.prompt"
    await ensure_topics(settings.kafka, {topic: 1})
    producer = KafkaProducer(settings.kafka)
    consumer = KafkaConsumer(settings.kafka)
    await consumer.assign([(topic, 0, OFFSET_BEGINNING)])
    try:
        await producer.send(topic, b"warm")
        assert [r.value for r in await consumer.poll(500, 10.0)] == [b"warm"]  # the first fetch, connected
        for i in range(3):
            polling = asyncio.create_task(consumer.poll(500, 10.0))
            await asyncio.sleep(0.2)  # the poll is waiting
            sent = time.monotonic()
            await producer.send(topic, b"%d" % i)
            records = await polling
            assert [r.value for r in records] == [b"%d" % i]
            assert time.monotonic() - sent < 2.0  # not the poll's 10 s
    finally:
        await producer.close()
        await consumer.close()


async def test_many_messages_sent_at_once_are_each_acknowledged_at_their_own_offset(
    settings: Settings, namespace: str
) -> None:
    topic = f"{namespace}.many"
    await ensure_topics(settings.kafka, {topic: 1})
    producer = KafkaProducer(settings.kafka)
    acks = await asyncio.gather(*(producer.send(topic, b"%d" % i) for i in range(200)))
    await producer.close()
    assert sorted(acks) == [(0, offset) for offset in range(200)]  # a fresh topic: every offset once


async def test_end_offsets_are_read_while_the_consumer_waits_in_a_poll(settings: Settings, namespace: str) -> None:
    topic = f"{namespace}.ends"
    await ensure_topics(settings.kafka, {topic: 2})
    producer = KafkaProducer(settings.kafka)
    await asyncio.gather(*(producer.send(topic, b"x", partition=1) for _ in range(3)))
    await producer.close()
    consumer = KafkaConsumer(settings.kafka)
    await consumer.assign([(topic, 0, OFFSET_BEGINNING)])
    done: list[str] = []

    async def poll() -> None:
        await consumer.poll(10, 5.0)  # partition 0 is empty: the consumer's thread waits out the 5 s
        done.append("poll")

    async def ends() -> dict[int, int]:
        await asyncio.sleep(0.2)  # the poll is under way
        found = await consumer.end_offsets(topic, [0, 1])
        done.append("end_offsets")
        return found

    try:
        _, found = await asyncio.gather(poll(), ends())
    finally:
        await consumer.close()
    assert found == {0: 0, 1: 3}
    # A dispatcher taking shards reads these before its first read of them; asked behind the consumer's own fetches
    # they waited up to fetch.wait.max.ms per partition (2 s for four at a take-over).
    assert done == ["end_offsets", "poll"]


async def test_end_offsets_survive_an_offsets_consumer_that_fails(settings: Settings, namespace: str) -> None:
    topic = f"{namespace}.stale"
    await ensure_topics(settings.kafka, {topic: 2})
    producer = KafkaProducer(settings.kafka)
    await asyncio.gather(*(producer.send(topic, b"x", partition=0) for _ in range(2)))
    await producer.close()
    consumer = KafkaConsumer(settings.kafka)
    await consumer.assign([(topic, 1, OFFSET_BEGINNING)])

    class Stale:
        """An offsets consumer whose metadata names a broker that no longer leads the partition."""

        closed = False

        def get_watermark_offsets(self, *_: object, **__: object) -> tuple[int, int]:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))

        def close(self) -> None:
            self.closed = True

    stale = Stale()
    consumer._offsets = stale  # type: ignore[assignment]
    try:
        first = await consumer.end_offsets(topic, [0, 1])  # answered by the fetching consumer
        second = await consumer.end_offsets(topic, [0, 1])  # by a fresh offsets consumer
        fresh = consumer._offsets
    finally:
        await consumer.close()
    assert first == second == {0: 2, 1: 0}
    assert stale.closed and fresh is not None and not isinstance(fresh, Stale)


async def test_an_ephemeral_znode_is_gone_after_its_session_closes(settings: Settings, namespace: str) -> None:
    zk = ZooKeeper(settings.zookeeper, chroot=f"/{namespace}")
    await zk.start()
    assert zk.state is SessionState.CONNECTED
    await zk.call("create", "/members/a", b"x", ephemeral=True, makepath=True)
    await zk.stop()
    observer = KazooClient(hosts=f"{settings.zookeeper.hosts}/{namespace}")
    await asyncio.to_thread(observer.start, 10)
    try:
        assert await asyncio.to_thread(observer.exists, "/members/a") is None
        assert await asyncio.to_thread(observer.exists, "/members") is not None
    finally:
        await asyncio.to_thread(observer.stop)


async def test_redis_round_trip_under_a_key_prefix(settings: Settings, namespace: str) -> None:
    client = RedisClient(settings.redis, prefix=f"{namespace}:")
    assert await client.ping()
    await client.redis.set(client.key("hello"), b"world", ex=60)
    assert await client.redis.get(f"{namespace}:hello") == b"world"
    await client.close()


async def test_a_burst_beyond_the_pool_waits_for_connections_instead_of_failing(
    settings: Settings, namespace: str
) -> None:
    redis = RedisClient(settings.redis, prefix=f"{namespace}:")
    key = redis.key("burst")
    try:  # a batch create's items and a worker's runs: far more commands at once than pooled connections
        counts = await asyncio.gather(*(redis.redis.incr(key) for _ in range(400)))
        scripted = await asyncio.gather(*(redis.run_script("return ARGV[1]", [key], [i]) for i in range(400)))
    finally:
        await redis.redis.delete(key)
        await redis.close()
    assert sorted(counts) == list(range(1, 401))
    assert scripted == [str(i).encode() for i in range(400)]


async def test_the_redis_adapter_offers_the_commands_the_processes_use(
    settings: Settings, namespace: str
) -> None:
    client = RedisClient(settings.redis, prefix=f"{namespace}:")
    counter, absent = client.key("counter"), client.key("absent")
    try:
        assert await client.set_if_absent(counter, 5)
        assert not await client.set_if_absent(counter, 9)
        assert await client.decrement(counter) == 4
        async with client.pipeline() as pipe:
            pipe.incrby(counter, 3)
            pipe.expire(counter, 60)
            assert await pipe.execute() == [7, True]
        assert await client.get_many([counter, absent]) == [b"7", None]
        await client.redis.hset(client.key("hash"), "field", "x")
        assert await client.hash_field(client.key("hash"), "field") == b"x"
        assert await client.hash_field(client.key("hash"), "other") is None
        assert await client.script("return redis.call('INCR', KEYS[1])")(keys=[counter]) == 8
        assert client.script("return 1") is client.script("return 1")  # registered once per source
    finally:
        await client.close()


async def test_script_calls_go_through_the_pipelined_connection_and_answer_as_redis_py_did(
    settings: Settings, namespace: str
) -> None:
    client = RedisClient(settings.redis, prefix=f"{namespace}:")
    key = client.key("scripted")
    assert client._batcher._connection is not None  # the stack's redis:// URL: the pipelined connection
    try:
        assert await client.run_script("return {redis.call('INCRBY', KEYS[1], ARGV[1]), ARGV[2], false}", [key], [
            5, "x",
        ]) == [5, b"x", None]  # fmt: skip
        await client.redis.script_flush()  # Redis restarted or flushed: NOSCRIPT, loaded again, answered
        assert await client.run_script("return redis.call('INCRBY', KEYS[1], ARGV[1])", [key], [2]) == 7
        with pytest.raises(ResponseError, match="boom"):
            await client.run_script("return redis.error_reply('boom')", [key], [])
        assert await client.run_script("return redis.call('GET', KEYS[1])", [key], []) == b"7"
    finally:
        await client.redis.delete(key)
        await client.close()


async def test_script_calls_on_a_url_with_options_go_through_redis_py_pipelines(
    settings: Settings, namespace: str
) -> None:
    url = f"{settings.redis.url}?socket_timeout=2"  # an option the pipelined connection does not read
    client = RedisClient(dataclasses.replace(settings.redis, url=url), prefix=f"{namespace}:")
    key = client.key("options")
    assert client._batcher._connection is None
    try:
        answers = await asyncio.gather(*(client.run_script("return ARGV[1]", [key], [i]) for i in range(5)))
        assert answers == [str(i).encode() for i in range(5)]
        await client.redis.script_flush()
        assert await client.run_script("return redis.call('INCRBY', KEYS[1], ARGV[1])", [key], [3]) == 3
    finally:
        await client.redis.delete(key)
        await client.close()


async def test_the_session_id_owns_the_ephemeral_znodes_the_session_creates(settings: Settings, namespace: str) -> None:
    zk = ZooKeeper(settings.zookeeper, chroot=f"/{namespace}")
    assert zk.session_id is None
    await zk.start()
    try:
        await zk.call("create", "/leader", b"x", ephemeral=True)
        _, stat = await zk.call("get", "/leader")
        assert zk.session_id is not None and stat.ephemeralOwner == zk.session_id
    finally:
        await zk.stop()
    assert zk.session_id is None


async def test_an_unreachable_cassandra_is_reported_unavailable(settings: Settings) -> None:
    from tickwheel.errors import Unavailable

    dead = dataclasses.replace(settings.cassandra, hosts=("127.0.0.1:1",), connect_timeout_s=1.0)
    try:
        await CassandraStore.connect(dead)
    except Unavailable as exc:
        assert exc.retriable
    else:
        raise AssertionError("connect to a closed port succeeded")


@pytest.mark.restarts_servers
async def test_a_redis_client_keeps_working_across_a_redis_restart(settings: Settings, namespace: str) -> None:
    from tickwheel.dev import stack

    if "redis" in stack.endpoint_overrides():
        raise AssertionError("this test restarts the stack's own Redis; TICKWHEEL_REDIS points elsewhere")
    client = RedisClient(settings.redis, prefix=f"{namespace}:")
    assert await client.ping()
    await asyncio.to_thread(stack.stop_server, STACK_DIR, "redis")
    await asyncio.to_thread(stack.start_server, STACK_DIR, "redis")
    assert await client.ping()  # the pooled connection died with the old server: a fresh one answers
    await client.close()


@pytest.mark.restarts_servers
async def test_script_calls_keep_working_across_a_redis_restart(settings: Settings, namespace: str) -> None:
    from tickwheel.dev import stack

    if "redis" in stack.endpoint_overrides():
        raise AssertionError("this test restarts the stack's own Redis; TICKWHEEL_REDIS points elsewhere")
    client = RedisClient(settings.redis, prefix=f"{namespace}:")
    key = client.key("restarted")
    script = "return redis.call('INCR', KEYS[1])"
    try:
        assert await client.run_script(script, [key], []) == 1
        await asyncio.to_thread(stack.stop_server, STACK_DIR, "redis")
        with pytest.raises(REDIS_DOWN):
            await client.run_script(script, [key], [])
        await asyncio.to_thread(stack.start_server, STACK_DIR, "redis")
        # a new connection, and the script loaded again on the new server (its scripts died with the old one)
        assert await client.run_script(script, [key], []) in (1, 2)  # the stack's Redis may keep its data
    finally:
        await client.redis.delete(key)
        await client.close()
