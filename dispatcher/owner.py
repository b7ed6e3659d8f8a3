"""Which shards this dispatcher fires, and whether it may fire at all: the member and assignment membership
reports, applied to the shard table (acquire from the checkpoint minus the grace, drop), the session and liveness
that pause firing, and the handover of a leaving member. The decisions are `dispatcher.ownership`'s."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from dispatcher.horizon import Horizon
from dispatcher.ownership import LEAVING_TAG, OwnershipChange, is_newer, may_fire, plan_ownership, resume_from
from dispatcher.preload import loadable_until
from dispatcher.shards import Clock, ShardState, ShardTable
from schemas.messages import ShardAssignment
from tickwheel import metrics
from tickwheel.bus.ports import NearTermFeed
from tickwheel.coordination.zookeeper import SessionState
from tickwheel.settings import Settings
from tickwheel.store.ports import CheckpointStore

log = logging.getLogger(__name__)


class Ownership:
    """The member, its assignment and epoch, the session, and the shards of the table they give it."""

    def __init__(
        self,
        settings: Settings,
        table: ShardTable,
        store: CheckpointStore,
        near: NearTermFeed,
        horizon: Horizon,
        clock: Clock,
    ):
        self.settings, self.cfg = settings, settings.dispatcher
        self.table, self.store, self.near, self.horizon, self.clock = table, store, near, horizon, clock
        self.member: str | None = None
        self.assignment: ShardAssignment | None = None
        self.epoch = 0
        self.session = SessionState.CONNECTED
        self.paused = True  # until registered
        self.leaving = False
        self.last_alive = clock.monotonic()
        self._reconcile = asyncio.Event()

    # -- what membership tells the engine -------------------------------------------------------------------
    def set_member(self, member: str | None) -> None:
        """Registered as `member` (None: not registered)."""
        self.member = member
        self._reconcile.set()

    def offer(self, assignment: ShardAssignment) -> None:
        """An assignment read from ZooKeeper: applied if newer than the one held."""
        if is_newer(assignment, self.assignment):
            self.assignment = assignment
            self._reconcile.set()

    def on_session(self, state: SessionState) -> None:
        """SUSPENDED: stop firing now, keep the wheel. LOST: drop every range and the wheel. CONNECTED: resume."""
        self.session = state
        if state is SessionState.LOST:
            self.drop_all()
        if state is SessionState.CONNECTED:
            self.table.wake.set()

    def confirm_alive(self) -> None:
        """The liveness probe answered: firing may go on."""
        self.last_alive = self.clock.monotonic()
        self.paused = False

    def can_fire(self) -> bool:
        """Connected, registered and its member znode confirmed within `alive_window_s`."""
        since = self.clock.monotonic() - self.last_alive
        return may_fire(self.session, self.paused, since, self.cfg.alive_window_s)

    def drop_all(self) -> None:
        """Forget the member, every shard and the wheel (the session is lost)."""
        log.warning("dropping all %d owned shards and the wheel", len(self.table.owned))
        self.member = None
        self.paused = True
        self.table.clear()

    # -- applying the assignment ----------------------------------------------------------------------------
    async def reconcile_loop(self) -> None:
        """Apply each change of member or assignment (a failure is retried after a second)."""
        while True:
            await self._reconcile.wait()
            self._reconcile.clear()
            if self.leaving:  # our shards stay ours until their new owners fence us (hand_over)
                continue
            try:
                await self.apply(plan_ownership(frozenset(self.table.owned), self.assignment, self.member))
            except Exception:
                log.exception("applying the assignment failed; retrying")
                await self.clock.sleep(1.0)
                self._reconcile.set()

    async def apply(self, change: OwnershipChange) -> None:
        """Take the epoch, drop the shards removed, acquire the shards added."""
        table = self.table
        async with table.scan_lock:
            self.epoch = change.epoch
            for shard in change.removed:
                table.drop_shard(shard)
            if change.removed and not change.added:
                await self.near.retarget(set(table.owned))
            if change.added:
                await self._acquire(change.added)
            if change.added or change.removed:
                log.info(
                    "epoch %d: own %d shards (+%d -%d)",
                    change.epoch,
                    len(table.owned),
                    len(change.added),
                    len(change.removed),
                )
            metrics.owned_shards.set(len(table.owned))

    async def _acquire(self, added: frozenset[int]) -> None:
        table, now = self.table, self.clock.now()
        marks = await self.store.read_checkpoints(added)
        if table.loaded_until is None:
            table.loaded_until = loadable_until(now, self.cfg.preload_horizon_s)
        for shard in added:
            mark = marks.get(shard)
            handed_over = mark is not None and mark.owner.endswith(LEAVING_TAG)
            start = resume_from(
                mark.fired_through if mark else None, now, self.cfg.resume_grace_s, handed_over=handed_over
            )
            table.owned[shard] = ShardState(start=start)
        started = time.perf_counter()
        try:
            await self.near.retarget(set(table.owned))  # end offsets before the scan
            runs = await self.horizon.read({s: table.owned[s].start for s in added}, table.loaded_until)
        except BaseException:
            for shard in added:
                table.drop_shard(shard)
            raise
        table.insert_all(runs)
        for shard in added:
            if shard in table.owned:
                table.owned[shard] = replace(table.owned[shard], scanned=True)
        metrics.preload_seconds.observe(time.perf_counter() - started)

    async def hand_over(self, timeout_s: float, poll_s: float = 0.25) -> int:
        """Leaving (after `Dispatcher.begin_leaving`): keep firing each shard until its new owner has taken it:
        checkpointed under a newer epoch a watermark past the instant the handover began, so it has sent the runs
        it re-fires from our mark (minus the grace) and fires the current ones. Both fire meanwhile (the claim
        makes the second call harmless); nobody fires nothing. Returns how many shards nobody took in time."""
        table = self.table
        began = self.clock.now()
        deadline = self.clock.monotonic() + timeout_s
        while table.owned and self.clock.monotonic() < deadline:
            try:
                marks = await self.store.read_checkpoints(set(table.owned))
            except Exception as exc:
                log.warning("reading checkpoints during the handover failed: %s", exc)
                marks = {}
            for shard, mark in marks.items():
                if mark.owner_epoch > self.epoch and mark.fired_through >= began and shard in table.owned:
                    table.drop_shard(shard)
            if table.owned:
                await self.clock.sleep(poll_s)
        log.info("handover done: %d shards left without a new owner", len(table.owned))
        return len(table.owned)
