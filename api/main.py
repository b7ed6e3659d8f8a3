"""`tickwheel api`: the HTTP API process (aiohttp) on Cassandra, Kafka and Redis."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from tickwheel import heap
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store import audit, jobs, runs, tenants
from tickwheel.store.cassandra import CassandraStore, statements_of
from tickwheel.store.tables import CassandraTables

from .app import make_app

__all__ = ["make_app", "serve"]

log = logging.getLogger(__name__)


async def serve(settings: Settings) -> None:
    """Connect to the servers, listen on settings.api.host:port until cancelled, then close everything."""
    store = await CassandraStore.connect(settings.cassandra)
    await store.prepare_all(statements_of(audit, jobs, runs, tenants))
    # It only announces: rows due soon through `producer`, rows due seconds ahead through `ahead` (fewer requests).
    producer = KafkaProducer(settings.kafka, linger_ms=settings.kafka.announce_linger_ms)
    ahead = KafkaProducer(settings.kafka, linger_ms=settings.kafka.announce_ahead_linger_ms)
    redis = RedisClient(settings.redis)
    app = make_app(settings, CassandraTables(store), producer, redis, ahead=ahead)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.api.host, settings.api.port)
    await site.start()
    log.info("api listening on %s:%s", settings.api.host, settings.api.port)
    heap.settle_after_start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await producer.close()
        await ahead.close()
        await redis.close()
        await store.close()
