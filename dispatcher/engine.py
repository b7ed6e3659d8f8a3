"""The dispatcher's engine: four parts over one shard table, started and stopped together.

`Ownership` (dispatcher/owner.py) applies the member and assignment membership reports and decides whether the
engine may fire; `Horizon` (horizon.py) fills the wheel (preload, near-term topic, rescan); `Firing`
(fire_loop.py) empties it onto the lanes, chaining recurring jobs; `Checkpointer` (checkpointer.py) writes how far
each shard has fired. They share `ShardTable` (shards.py). ZooKeeper is driven from `dispatcher.membership`; the
decisions are the pure functions of `dispatcher.ownership`, `dispatcher.preload` and `dispatcher.firing`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from dispatcher.checkpointer import Checkpointer
from dispatcher.fire_loop import Firing
from dispatcher.horizon import Horizon
from dispatcher.owner import Ownership
from dispatcher.ownership import OwnershipChange, plan_ownership
from dispatcher.shards import Clock, ShardState, ShardTable
from schemas.messages import ShardAssignment
from tickwheel.bus.ports import NearTermFeed, Publisher
from tickwheel.coordination.zookeeper import SessionState
from tickwheel.settings import Settings
from tickwheel.store.ports import DispatcherStore

__all__ = ["Dispatcher", "ShardState"]

log = logging.getLogger(__name__)


class Dispatcher:
    """Fires the runs of the shards its member owns. Constructed with settings plus collaborators; the wall
    clock (epoch seconds), the monotonic clock and sleep are injectable."""

    def __init__(
        self,
        settings: Settings,
        store: DispatcherStore,
        producer: Publisher,
        near: NearTermFeed,
        *,
        name: str,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.settings = settings
        self.cfg = cfg = settings.dispatcher
        self.name = name
        self.clock = Clock(clock, monotonic, sleep)
        self.table = ShardTable(self.clock, cfg.capacity_per_s)
        self.horizon = Horizon(self.table, store, near, cfg, self.clock)
        self.ownership = Ownership(settings, self.table, store, near, self.horizon, self.clock, self._spawn)
        self.firing = Firing(settings, self.table, store, producer, self.ownership, self.clock, self._spawn, name=name)
        self.checkpointer = Checkpointer(self.table, store, self.ownership, cfg, self.clock)
        self._tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the fire, reconcile, near-term and moved-shard loops and the periodic horizon, rescan and
        checkpoints."""
        ownership = self.ownership
        for loop in (self.firing.loop, ownership.reconcile_loop, self.horizon.near_loop, ownership.watch_moves):
            self._spawn(loop())
        cfg = self.cfg
        self._spawn(self._every(cfg.scan_interval_s, self.horizon.extend, "extending the horizon"))
        self._spawn(self._every(cfg.rescan_interval_s, self.horizon.rescan, "rescan"))
        self._spawn(self._every(cfg.checkpoint_interval_s, self.checkpointer.checkpoint, "checkpoint"))

    async def _every(self, interval_s: float, step: Callable[[], Awaitable[object]], what: str) -> None:
        """Run `step` every `interval_s`; a failure is logged and the next interval tries again (the horizon,
        the rescan and the checkpoints: each is safe to repeat and catches up on its next run)."""
        while True:
            await self.clock.sleep(interval_s)
            try:
                await step()
            except Exception as exc:
                log.warning("%s failed: %s", what, exc)

    async def stop(self) -> None:
        """Cancel every loop and send in flight and wait for them. A task that ended with an error instead of
        its cancellation is a bug in a loop: logged with its traceback, never silently dropped."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task, outcome in zip(tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True):
            if isinstance(outcome, Exception):
                log.error("dispatcher task %s ended with an error", task.get_name(), exc_info=outcome)

    def ready(self) -> bool:
        """Registered, allowed to fire, the assignment it holds applied and the horizon of every shard it owns read
        (the readiness probe; called from the health thread, so it only reads, from snapshots). A starting
        dispatcher answers /healthz at once but is ready only once it fires everything it owns: on a freshly
        started cluster the first acquisition took 30-70 s, and runs due meanwhile went out that late."""
        ownership = self.ownership
        if ownership.member is None or not ownership.can_fire():
            return False
        owned = dict(self.table.owned)
        change = plan_ownership(frozenset(owned), ownership.assignment, ownership.member)
        moving = set(ownership.moving)  # still fired until their new owner has read them
        return not (change.added or change.removed - moving) and all(state.scanned for state in owned.values())

    # -- what membership tells the engine -------------------------------------------------------------------
    def set_member(self, member: str | None) -> None:
        """`Ownership.set_member`."""
        self.ownership.set_member(member)

    def offer(self, assignment: ShardAssignment) -> None:
        """`Ownership.offer`."""
        self.ownership.offer(assignment)

    def on_session(self, state: SessionState) -> None:
        """`Ownership.on_session`."""
        self.ownership.on_session(state)

    def confirm_alive(self) -> None:
        """`Ownership.confirm_alive`."""
        self.ownership.confirm_alive()

    def drop_all(self) -> None:
        """`Ownership.drop_all`."""
        self.ownership.drop_all()

    async def apply(self, change: OwnershipChange) -> None:
        """`Ownership.apply`."""
        await self.ownership.apply(change)

    async def begin_leaving(self) -> None:
        """A rolling restart: keep firing the shards we own, take no new assignment, and write our watermarks
        tagged as handed over (before anyone is told, so the new owners read them: they resume with seconds of
        grace instead of minutes)."""
        self.ownership.leaving = True
        with contextlib.suppress(Exception):  # a mark not written only means a longer re-fire by the new owner
            await self.checkpointer.checkpoint(force=True)

    async def hand_over(self, timeout_s: float, poll_s: float = 0.25) -> int:
        """`Ownership.hand_over`: the shards nobody took within `timeout_s`."""
        return await self.ownership.hand_over(timeout_s, poll_s)

    # -- what tests drive -----------------------------------------------------------------------------------
    def fire_due(self) -> int | None:
        """`Firing.fire_due`."""
        return self.firing.fire_due()

    async def settle(self) -> None:
        """`Firing.settle`."""
        await self.firing.settle()
