"""`tickwheel dispatcher`: owns shard ranges through ZooKeeper, preloads their runs into a timing wheel and fires
them onto the lane topics (DESIGN.md protocols 2, 3 and 7)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.engine import Dispatcher
from dispatcher.membership import Membership
from dispatcher.nearfeed import NearFeed
from tickwheel import heap
from tickwheel.bus.kafka import KafkaConsumer, KafkaProducer
from tickwheel.coordination.zookeeper import ZooKeeper
from tickwheel.core.liveness import EvictionPolicy, window_is_safe
from tickwheel.errors import SettingsError
from tickwheel.health import ThreadedHealthServer
from tickwheel.settings import Settings
from tickwheel.store import buckets, checkpoints, far, jobs, run_history, runs
from tickwheel.store.cassandra import CassandraStore, statements_of
from tickwheel.store.tables import CassandraTables

log = logging.getLogger(__name__)


@dataclass
class Running:
    """A started dispatcher and everything it holds, so it can be stopped (tests run several in one process)."""

    engine: Dispatcher
    membership: Membership
    zk: ZooKeeper
    store: CassandraStore
    producer: KafkaProducer
    near: NearFeed
    health: ThreadedHealthServer
    own_store: bool
    stopped: bool = False

    async def leave(self, timeout_s: float) -> int:
        """A rolling restart: announce we leave, keep firing until the new owners have taken every shard (at
        most `timeout_s`); returns how many shards were not taken. Then `stop`."""
        await self.engine.begin_leaving()
        await self.membership.leave()
        if await self.membership.successors() == 0:
            # Nobody could take the shards: waiting out `timeout_s` would only delay the exit (and `tickwheel
            # down` killed the last dispatcher after 20 s every time). A later starter resumes from checkpoints.
            log.info("no other dispatcher to hand the shards to: leaving at once")
            return await self.engine.hand_over(0.0)
        return await self.engine.hand_over(timeout_s)

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        await self.membership.stop()
        await self.engine.stop()
        await self.health.stop()
        await self.zk.stop()
        await self.near.close()
        await self.producer.close()
        if self.own_store:
            await self.store.close()


async def start(
    settings: Settings,
    *,
    store: CassandraStore | None = None,
    name: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Running:
    """Connect, register and start firing; returns the handle to stop it. `clock` (epoch seconds) is the
    engine's wall clock (tests move it years ahead)."""
    check_alive_window(settings)
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    own_store = store is None
    store = store or await CassandraStore.connect(settings.cassandra)
    await store.prepare_all(statements_of(buckets, checkpoints, far, jobs, run_history, runs))
    producer = KafkaProducer(settings.kafka, linger_ms=settings.kafka.lane_linger_ms)
    consumer = KafkaConsumer(settings.kafka, group_id=f"tickwheel-dispatcher-{name}")
    near = NearFeed(settings, consumer)
    engine = Dispatcher(settings, CassandraTables(store), producer, near, name=name, clock=clock)
    zk = ZooKeeper(settings.zookeeper)
    await zk.start()
    health = ThreadedHealthServer(settings.dispatcher.host, settings.dispatcher.port, engine.ready)
    await health.start()
    address = (advertised_host(settings.dispatcher.host), health.port)
    membership = Membership(zk, engine, liveness_interval_s=settings.dispatcher.liveness_interval_s, address=address)
    engine.start()
    await membership.start()
    log.info("dispatcher %s serving on port %d", name, health.port)
    return Running(engine, membership, zk, store, producer, near, health, own_store)


def check_alive_window(settings: Settings) -> None:
    """Refuse to start with an alive window the coordinator's silence eviction does not outlast: a stopped
    dispatcher could fire again, on resuming, shards already moved (tickwheel/core/liveness.py)."""
    cfg = settings.coordinator
    policy = EvictionPolicy(silent_s=cfg.member_silent_evict_s, timeout_s=cfg.member_probe_timeout_s)
    if not window_is_safe(settings.dispatcher.alive_window_s, policy):
        raise SettingsError(
            f"dispatcher.alive_window_s ({settings.dispatcher.alive_window_s} s) must end before the coordinator "
            f"evicts a silent member: at most member_silent_evict_s - member_probe_timeout_s - 0.25 s "
            f"({cfg.member_silent_evict_s} - {cfg.member_probe_timeout_s} - 0.25)"
        )


def advertised_host(bind_host: str) -> str:
    """The address the coordinator can probe us at: the bind address, or this host's when bound to all."""
    if bind_host in ("", "0.0.0.0", "::"):
        return socket.gethostbyname(socket.gethostname())
    return bind_host


async def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then hand the shards over before exiting (a rolling restart)."""
    running = await start(settings)
    heap.settle_after_start()
    leave = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, leave.set)
    try:
        await leave.wait()
        await running.leave(settings.dispatcher.handover_timeout_s)
    finally:
        await running.stop()
