"""`tickwheel coordinator`: any number of replicas, one active (leader election on an ephemeral znode). The
active one assigns shards to the live dispatchers with minimal movement and publishes the assignment with a
growing epoch, runs the sweeper and publishes the peak forecast (DESIGN.md protocols 7 and 8)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from coordinator.assignment import next_assignment, unowned
from coordinator.forecast import forecast
from coordinator.liveness import MemberProbe
from coordinator.mover import FarMover
from coordinator.reconciler import Reconciler, missed_message
from coordinator.sweeper import Sweeper
from schemas.messages import ShardAssignment, decode_assignment, encode, topic_names
from tickwheel import heap, metrics
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.bus.near import NearAnnouncer
from tickwheel.coordination.zookeeper import NodeExistsError, NoNodeError, SessionState, ZooKeeper
from tickwheel.core.liveness import EvictionPolicy
from tickwheel.core.reconcile import Finding
from tickwheel.health import HealthServer
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import Job
from tickwheel.store.ports import CoordinatorStore
from tickwheel.store.tables import CassandraTables

log = logging.getLogger(__name__)

MEMBERS = "/dispatchers/members"
LEAVING = "/dispatchers/leaving"
ASSIGNMENT = "/dispatchers/assignment"
LEADER = "/coordinator/leader"


class Coordinator:
    def __init__(
        self,
        settings: Settings,
        zk: ZooKeeper,
        sweeper: Sweeper,
        mover: FarMover,
        store: CoordinatorStore,
        *,
        name: str,
        reconciler: Reconciler | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self.zk = zk
        self.sweeper = sweeper
        self.mover = mover
        self.reconciler = reconciler
        self.store = store
        self.name = name
        self._clock = clock
        self.leader = False
        self.assignment: ShardAssignment | None = None
        self.forecast: list[int] = []
        self._members: list[str] | None = None
        self._leaving: set[str] = set()
        cfg = settings.coordinator
        self.probe = MemberProbe(
            zk, EvictionPolicy(silent_s=cfg.member_silent_evict_s, timeout_s=cfg.member_probe_timeout_s)
        )
        self._changed = asyncio.Event()
        self._leader_gone = asyncio.Event()
        self._watching = False
        self._watching_leader = False
        self._tasks: list[asyncio.Task[Any]] = []

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def ready(self) -> bool:
        return self.zk.state is SessionState.CONNECTED

    async def start(self) -> None:
        self.zk.on_state(self._on_state)
        for path in (MEMBERS, LEAVING, "/coordinator"):
            await self.zk.ensure_path(path)
        for loop in (self._election_loop, self._assign_loop, self._forecast_loop, self._move_loop):
            self._spawn(loop())
        cfg = self.settings.coordinator
        self._spawn(self._every_while_leading(cfg.sweep_interval_s, self._sweep, "sweep"))
        self._spawn(self._every_while_leading(cfg.reconcile_interval_s, self._reconcile, "reconciling"))
        probing = "probing the dispatchers"
        self._spawn(self._every_while_leading(cfg.member_probe_interval_s, self._probe, probing, from_start=True))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.leader:
            with contextlib.suppress(Exception):
                await self.zk.call("delete", LEADER)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    def _on_state(self, state: SessionState) -> None:
        if state is not SessionState.CONNECTED and self.leader:
            log.warning("zookeeper session %s: no longer acting as leader", state.value)
            self.leader = False
            self.mover.forget()
            self._leader_gone.set()

    # -- election -------------------------------------------------------------------------------------------
    async def _election_loop(self) -> None:
        while True:
            if not self.leader and self.zk.state is SessionState.CONNECTED:
                try:
                    await self._try_lead()
                except Exception as exc:
                    log.warning("leader election failed: %s", exc)
            await self._wait_leader_gone(1.0)

    async def _try_lead(self) -> None:
        try:
            await self.zk.call("create", LEADER, self.name.encode(), ephemeral=True)
        except NodeExistsError:
            if not await self._leader_node_is_ours():
                self._watch_leader_node()
                return
        log.info("coordinator %s is the leader", self.name)
        self.leader = True
        if not self._watching:
            self._watching = True
            self.zk.watch_children(MEMBERS, self._on_members)
            self.zk.watch_children(LEAVING, self._on_leaving)
        self._changed.set()

    async def _leader_node_is_ours(self) -> bool:
        """After a SUSPENDED session that survived, the leader znode may still be ours: lead again."""
        try:
            _, stat = await self.zk.call("get", LEADER)
        except NoNodeError:
            return False
        return bool(stat.ephemeralOwner == self.zk.session_id)

    def _watch_leader_node(self) -> None:
        if not self._watching_leader:  # one watch for the process' life: kazoo re-arms it after reconnects
            self._watching_leader = True
            self.zk.watch_data(LEADER, self._on_leader_node)

    def _on_leader_node(self, data: bytes | None) -> None:
        if data is None:
            self._leader_gone.set()

    async def _wait_leader_gone(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._leader_gone.wait(), timeout_s)
        self._leader_gone.clear()

    # -- assignment -----------------------------------------------------------------------------------------
    def _on_members(self, members: list[str]) -> None:
        self._members = members
        metrics.dispatchers_live.set(len(members))
        self._changed.set()

    def _on_leaving(self, members: list[str]) -> None:
        self._leaving = set(members)
        self._changed.set()

    async def _assign_loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            if not self.leader or self._members is None:
                continue
            try:  # a leaving member keeps firing until the others have taken its shards
                await self.publish([m for m in self._members if m not in self._leaving])
            except Exception as exc:
                log.warning("publishing the assignment failed, retrying: %s", exc)
                await asyncio.sleep(1.0)
                self._changed.set()

    async def publish(self, members: list[str]) -> ShardAssignment | None:
        """Publish the assignment for `members` if it differs from the current one (compare-and-set)."""
        try:
            data, stat = await self.zk.call("get", ASSIGNMENT)
            previous, version = (decode_assignment(data) if data else None), stat.version
        except NoNodeError:
            previous, version = None, -1
        # Without a published assignment (first start, or ZooKeeper's state lost) the epoch must still exceed
        # every epoch the checkpoints were fenced with.
        floor = await self.store.highest_epoch() if previous is None else 0
        new = next_assignment(previous, members, self.settings.shards, floor_epoch=floor)
        current = new or previous
        self.assignment = current
        metrics.assignment_epoch.set(current.epoch if current else 0)
        metrics.unowned_shards.set(unowned(current, self.settings.shards))
        if new is None:
            return None
        if version < 0:
            await self.zk.call("create", ASSIGNMENT, encode(new), makepath=True)
        else:
            await self.zk.call("set", ASSIGNMENT, encode(new), version=version)
        log.info("published assignment epoch %d for %d dispatchers", new.epoch, len(new.members))
        return new

    # -- sweeper and forecast -------------------------------------------------------------------------------
    async def _every_while_leading(
        self, interval_s: float, step: Callable[[], Awaitable[object]], what: str, *, from_start: bool = False
    ) -> None:
        """Every `interval_s`, while this coordinator leads, run `step`; a failure is logged and the next interval
        tries again (the sweep, the reconciliation and the member probe: each is safe to repeat). `from_start`:
        the interval runs from one step's start to the next (the probe, whose silent steps last its timeout)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while True:
            await asyncio.sleep(max(0.0, began + interval_s - loop.time()) if from_start else interval_s)
            began = loop.time()
            if self.leader:
                try:
                    await step()
                except Exception as exc:
                    log.warning("%s failed: %s", what, exc)

    async def _sweep(self) -> None:
        repairs = await self.sweeper.sweep(self.now())
        if repairs:
            log.warning("sweeper repaired %s", {r.value: n for r, n in repairs.items()})

    async def _reconcile(self) -> None:
        if self.reconciler is None:
            return
        findings = await self.reconciler.reconcile(self.now())
        if findings:
            log.warning("reconciler found %s", {v.value: n for v, n in findings.items()})

    async def _probe(self) -> None:
        if self._members:
            await self.probe.sweep(list(self._members))

    async def _move_loop(self) -> None:
        while True:
            if not self.leader:
                await asyncio.sleep(1.0)
                continue
            try:
                await self.mover.move(self.now())
            except Exception as exc:
                log.warning("moving far-horizon runs failed: %s", exc)
            await asyncio.sleep(self.settings.coordinator.far_move_interval_s)

    async def _forecast_loop(self) -> None:
        cfg = self.settings.coordinator
        while True:
            if self.leader:
                try:
                    self.forecast = await forecast(self.store, self.now(), cfg.forecast_minutes, self.settings.shards)
                except Exception as exc:
                    log.warning("forecast failed: %s", exc)
            await asyncio.sleep(cfg.forecast_interval_s)


@dataclass
class MissedSender:
    """Puts the reconciler's unrepaired misses on the job's lane, where a worker turns them into `missed` run
    events (worker/pipeline.py: kind `missed`)."""

    settings: Settings
    producer: KafkaProducer

    async def send(self, job: Job, finding: Finding) -> None:
        due = missed_message(job, finding, self.now())
        topic = topic_names(self.settings.kafka.topic_prefix)[due.lane]
        await self.producer.send(topic, encode(due), key=str(job.job_id).encode())

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)


@dataclass
class Running:
    coordinator: Coordinator
    zk: ZooKeeper
    store: CassandraStore
    producer: KafkaProducer
    health: HealthServer
    own_store: bool
    stopped: bool = False

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        await self.coordinator.stop()
        await self.health.stop()
        await self.zk.stop()
        await self.producer.close()
        if self.own_store:
            await self.store.close()


async def start(settings: Settings, *, store: CassandraStore | None = None, name: str | None = None) -> Running:
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    own_store = store is None
    store = store or await CassandraStore.connect(settings.cassandra)
    producer = KafkaProducer(settings.kafka)
    zk = ZooKeeper(settings.zookeeper)
    await zk.start()
    tables = CassandraTables(store)
    sweeper, mover = Sweeper(settings, tables, producer), FarMover(settings, tables, producer)
    reconciler = Reconciler(settings, tables, NearAnnouncer(settings, producer), MissedSender(settings, producer).send)
    coordinator = Coordinator(settings, zk, sweeper, mover, tables, name=name, reconciler=reconciler)
    health = HealthServer(settings.coordinator.host, settings.coordinator.port, coordinator.ready)
    await health.start()
    await coordinator.start()
    log.info("coordinator %s serving on port %d", name, health.port)
    return Running(coordinator, zk, store, producer, health, own_store)


async def serve(settings: Settings) -> None:
    running = await start(settings)
    heap.settle_after_start()
    try:
        await asyncio.Event().wait()
    finally:
        await running.stop()
