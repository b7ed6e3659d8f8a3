"""The worker process: lane consumers feeding the run pipeline, plus /healthz, /readyz and /metrics.

`Worker` is the composition (also used in-process by tests); `serve(settings)` runs one until SIGTERM/SIGINT,
then stops polling, finishes or hands back what it holds, commits and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.messages import LANES, Lane
from tickwheel import heap
from tickwheel.bus.kafka import KafkaProducer, group_session_floor_s
from tickwheel.bus.near import NearAnnouncer
from tickwheel.egress import EgressPolicy
from tickwheel.flow.limits import FlowLimits
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store import buckets, jobs, runs, tenants
from tickwheel.store.cassandra import CassandraStore, statements_of
from tickwheel.store.tables import CassandraTables
from worker.consumer import LaneConsumer
from worker.notify import Notifier
from worker.pipeline import RunHandler
from worker.targets import HttpCaller, KafkaCaller

log = logging.getLogger(__name__)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Connects to Cassandra, Kafka and Redis, then runs one LaneConsumer per configured lane."""

    def __init__(self, settings: Settings, *, redis_prefix: str | None = None):
        self.settings = settings
        self.id = worker_id()
        self._redis_prefix = redis_prefix
        self.consumers: list[LaneConsumer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._closers: list[Any] = []
        self.handler: RunHandler | None = None
        self.announcer: NearAnnouncer | None = None
        self.notifier: Notifier | None = None

    async def start(self) -> Worker:
        s = self.settings
        store = await CassandraStore.connect(s.cassandra)
        self._closers.append(store.close)
        await store.prepare_all(statements_of(buckets, jobs, runs, tenants))
        producer = KafkaProducer(s.kafka)
        self._closers.append(producer.close)
        redis = RedisClient(s.redis, prefix=self._redis_prefix)
        self._closers.append(redis.close)
        http = HttpCaller(EgressPolicy.from_cidrs(s.worker.egress_allow), s.worker.response_excerpt_bytes)
        await http.start()
        self._closers.append(http.close)
        self.announcer = NearAnnouncer(s, producer)
        limits = FlowLimits(s.worker, redis)
        tables = CassandraTables(store)
        self.notifier = Notifier(s.notify, tables, http)
        self.notifier.start()
        self._closers.append(self.notifier.stop)
        self.handler = RunHandler(
            s, tables, limits, http, KafkaCaller(producer, s.kafka.topic_prefix), self.id,
            announcer=self.announcer, notifier=self.notifier,
        )
        # A dead worker's partitions move after its group session: as short as the brokers accept.
        session_s = max(s.worker.group_session_s, await group_session_floor_s(s.kafka))
        for lane in self.lanes():
            consumer = LaneConsumer(
                s, lane, self.handler.handle, self.handler.tenants.weight_of, session_s=session_s
            )
            self.consumers.append(consumer)
            self._tasks.append(asyncio.create_task(consumer.run(), name=f"lane {lane}"))
        await asyncio.wait_for(asyncio.gather(*(c.subscribed.wait() for c in self.consumers)), 30)
        lanes = ", ".join(c.lane for c in self.consumers)
        log.info("worker %s consuming lanes %s (group session %.1f s)", self.id, lanes, session_s)
        return self

    def lanes(self) -> list[Lane]:
        wanted = set(self.settings.worker.lanes)
        unknown = wanted - set(LANES)
        if unknown:
            from tickwheel.errors import SettingsError

            raise SettingsError(f"TICKWHEEL_WORKER_LANES has unknown lanes: {', '.join(sorted(unknown))}")
        return [lane for lane in LANES if lane in wanted]

    def dead_lanes(self) -> list[str]:
        """Lanes whose consumer ended although nobody asked it to stop."""
        return [c.lane for c, t in zip(self.consumers, self._tasks, strict=True) if t.done() and not c.stopping]

    @property
    def inflight(self) -> int:
        return sum(c.inflight for c in self.consumers)

    async def stop(self) -> None:
        """Stop polling, finish or hand back what is held, commit, close the clients (newest first)."""
        for consumer in self.consumers:
            consumer.stop()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.error("lane consumer ended with %r", result)
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                await close()

    async def __aenter__(self) -> Worker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def health_app(worker: Worker) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        dead = worker.dead_lanes()
        body: dict[str, object] = {
            "status": "failing" if dead else "ok",
            "worker": worker.id,
            "inflight": worker.inflight,
        }
        if dead:
            body["dead_lanes"] = dead
        return web.json_response(body, status=503 if dead else 200)

    async def readyz(request: web.Request) -> web.Response:
        ready = bool(worker.consumers) and all(c.subscribed.is_set() for c in worker.consumers)
        return web.json_response({"ready": ready}, status=200 if ready else 503)

    async def metrics_page(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    return app


async def serve(settings: Settings) -> None:
    """Run a worker until SIGTERM or SIGINT."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    worker = await Worker(settings).start()
    runner = web.AppRunner(health_app(worker), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, settings.worker.host, settings.worker.port).start()
    heap.settle_after_start()
    try:
        await stopping.wait()
        log.info("worker %s stopping", worker.id)
    finally:
        await worker.stop()
        await runner.cleanup()
