"""Smoke tests: each adapter proven on its real server."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, KafkaProducer, ensure_topics
from tickwheel.coordination.zookeeper import SessionState, ZooKeeper
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore

STACK_DIR = Path(__file__).resolve().parents[2] / ".stack"


async def test_a_row_written_at_quorum_is_read_back(store: CassandraStore, namespace: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    await store.execute("INSERT INTO tenants (tenant_id, name, created_at) VALUES (?, ?, ?)", [namespace, "smoke", now])
    rows = await store.execute("SELECT name, created_at FROM tenants WHERE tenant_id = ?", [namespace])
    assert rows == [{"name": "smoke", "created_at": now.replace(tzinfo=None)}]
    assert store.settings.consistency == "QUORUM"


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
    from tickwheel import stack

    if "redis" in stack.endpoint_overrides():
        raise AssertionError("this test restarts the stack's own Redis; TICKWHEEL_REDIS points elsewhere")
    client = RedisClient(settings.redis, prefix=f"{namespace}:")
    assert await client.ping()
    await asyncio.to_thread(stack.stop_server, STACK_DIR, "redis")
    await asyncio.to_thread(stack.start_server, STACK_DIR, "redis")
    assert await client.ping()  # the pooled connection died with the old server: a fresh one answers
    await client.close()
