"""Which shards this dispatcher fires, and whether it may fire at all: the member and assignment membership
reports, applied to the shard table (acquire from the checkpoint minus the grace, drop), the session and liveness
that pause firing, and the handover of a leaving member. The decisions are `dispatcher.ownership`'s."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dispatcher.horizon import Horizon
from dispatcher.ownership import (
    Moving,
    OwnershipChange,
    is_newer,
    may_fire,
    owner_tag,
    plan_ownership,
    resume_from,
    taken_over,
)
from dispatcher.preload import SHARDS_PER_READ, loadable_until
from dispatcher.shards import Clock, ShardState, ShardTable
from schemas.messages import ShardAssignment
from tickwheel import metrics
from tickwheel.bus.ports import NearTermFeed
from tickwheel.coordination.zookeeper import SessionState
from tickwheel.core.acquisition import (
    Previous,
    backlog_reads,
    first_from,
    first_reads,
    previous_owner,
    resume_grace_s,
)
from tickwheel.settings import Settings
from tickwheel.store.ports import CheckpointStore
from tickwheel.store.records import Checkpoint

log = logging.getLogger(__name__)

HANDOVER_MARK_WAIT_S = 2.0
"""How long a take-over waits for a live member's tagged mark of a shard moved off it (it writes it when the move
reaches it, as we read; 512 LWTs, under a second unless the cluster is slow). Meanwhile that member fires the shard."""
HANDOVER_MARK_POLL_S = 0.25
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


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
        spawn: Spawn | None = None,
    ):
        self.settings, self.cfg = settings, settings.dispatcher
        self._spawn: Spawn = spawn or asyncio.ensure_future
        self.table, self.store, self.near, self.horizon, self.clock = table, store, near, horizon, clock
        self.member: str | None = None
        self.assignment: ShardAssignment | None = None
        self.epoch = 0
        self.session = SessionState.CONNECTED
        self.paused = True  # until registered
        self.leaving = False
        self.last_alive = clock.monotonic()
        self.moving: dict[int, Moving] = {}
        """Shards an assignment moved away, still fired until their new owner has read them (`watch_moves`)."""
        self.marking: asyncio.Task[Any] | None = None
        """The write of the last moved shards' tagged marks (`_mark_handed_over`), for tests to wait on."""
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
        self.moving.clear()
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
        """Take the epoch, hand the shards removed over (fired until their new owner has read them; see
        `watch_moves`), acquire the shards added."""
        table = self.table
        async with table.scan_lock:
            held_epoch, self.epoch = self.epoch, change.epoch
            for shard in change.kept | change.added:
                if self.moving.pop(shard, None) is not None:  # given back before its new owner took it
                    table.written.pop(shard, None)  # its next checkpoint replaces the tagged mark
            before = set(self.moving)
            moved = self._move(change)
            if moved - before:
                self.marking = self._spawn(self._mark_handed_over(moved - before, held_epoch))
            for shard in change.removed - moved:
                table.drop_shard(shard)
            if change.removed - moved and not change.added:
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

    def _move(self, change: OwnershipChange) -> set[int]:
        """The removed shards to keep firing until their new owner has read them: every scanned one (a shard not
        read yet has nothing to fire). The first move of a shard counts; a later assignment leaves it as it is."""
        began, deadline = self.clock.now(), self.clock.monotonic() + self.cfg.handover_timeout_s
        for shard in change.removed:
            state = self.table.owned.get(shard)
            if shard not in self.moving and state is not None and state.scanned:
                self.moving[shard] = Moving(change.epoch, began, deadline)
        return set(self.moving) & change.removed

    async def _mark_handed_over(self, shards: set[int], epoch: int) -> None:
        """Write the watermarks of shards just moved off us, tagged as handed over, under the epoch we owned them at:
        their new owner resumes them with seconds of grace (`tickwheel.core.acquisition.previous_owner`) instead of
        re-firing the minutes since our last mark, which moves only every `checkpoint_step_s`. Under our old epoch the
        write (`IF owner_epoch <= ?`) can never replace a mark the new owner has written; one not written costs only a
        longer re-fire, as in `Dispatcher.begin_leaving`."""
        table, member = self.table, self.member
        if member is None or not self.can_fire():  # a paused or evicted member's mark says nothing of a handover
            return
        marks = {
            shard: datetime.fromtimestamp(table.watermarks.mark(shard, table.fired_through_ms) / 1000, UTC)
            for shard in shards
            if shard in table.owned
        }
        try:
            await self.store.advance_checkpoints(marks, epoch, owner_tag(member, leaving=True), self.clock.now())
        except Exception as exc:
            log.warning("writing the handed-over marks of %d moved shards failed: %s", len(marks), exc)

    async def watch_moves(self, poll_s: float = 0.5) -> None:
        """Drop each moving shard once its new owner has checkpointed it past the move (or at its deadline): the
        handover of a rolling restart (`hand_over`), for any assignment that moves a shard off a live member, so a
        member that joins (a restarted or resumed dispatcher) leaves no gap while it reads what it was given."""
        while True:
            await self.clock.sleep(poll_s)
            if not self.moving or self.member is None:
                continue
            try:
                marks = await self.store.read_checkpoints(set(self.moving))
            except Exception as exc:
                log.warning("reading the checkpoints of moving shards failed: %s", exc)
                continue
            async with self.table.scan_lock:
                await self._drop_taken(marks)

    async def _drop_taken(self, marks: dict[int, Checkpoint]) -> None:
        now_s, member, table = self.clock.monotonic(), self.member or "", self.table
        taken = [s for s, m in self.moving.items() if taken_over(marks.get(s), member, m) or now_s > m.deadline_s]
        for shard in taken:
            del self.moving[shard]
            if shard in table.owned:
                table.drop_shard(shard)
        if taken and not self.moving:
            log.info("moved shards handed over: own %d shards", len(table.owned))
            await self.near.retarget(set(table.owned))
            metrics.owned_shards.set(len(table.owned))

    async def _acquire(self, added: frozenset[int]) -> None:
        """Own `added` and read their rows into the wheel: the minutes around now first, fired as each read answers
        (the checkpoints are read meanwhile), then the backlog since each checkpoint minus the grace
        (tickwheel/core/acquisition.py). The shards are scanned, so checkpointed and handed over, only after both."""
        table, now, lookback_s = self.table, self.clock.now(), self.cfg.acquire_lookback_s
        live = frozenset(self.assignment.members) if self.assignment is not None else frozenset()
        if table.loaded_until is None:
            table.loaded_until = loadable_until(now, self.cfg.preload_horizon_s)
        for shard in added:
            table.owned[shard] = ShardState(start=first_from(now, lookback_s))  # its start once the marks are read
        started = time.perf_counter()
        previous: dict[int, Previous] = {}
        starts = asyncio.ensure_future(self._starts(added, now, live, previous))
        try:
            await self.near.retarget(set(table.owned))  # end offsets before the scan
            retarget_s = time.perf_counter() - started
            first = first_reads(added, now, table.loaded_until, lookback_s, SHARDS_PER_READ)
            found = await self.horizon.load(first, starts)
            first_s = time.perf_counter() - started
            backlog = backlog_reads(await starts, first_from(now, lookback_s), SHARDS_PER_READ)
            found += await self.horizon.load(backlog, starts)
        except BaseException:
            starts.cancel()
            if starts.done() and not starts.cancelled():
                starts.exception()  # retrieved: the error that matters is the one raised below
            for shard in added:
                table.drop_shard(shard)
            raise
        for shard in added:
            if shard in table.owned:
                table.owned[shard] = replace(table.owned[shard], scanned=True)
        took_s = time.perf_counter() - started
        metrics.preload_seconds.observe(took_s)
        handed = sum(p is not Previous.GONE for p in previous.values())
        log.info(
            "acquired %d shards (%d handed over by a live member): near-term positions in %.2f s, minutes around now "
            "in %.2f s (%d reads), backlog in %.2f s (%d reads), %d runs",
            len(added), handed, retarget_s, first_s - retarget_s, len(first), took_s - first_s, len(backlog), found,
        )  # fmt: skip

    async def _starts(
        self, added: frozenset[int], now: datetime, live: frozenset[str], previous: dict[int, Previous]
    ) -> dict[int, datetime]:
        """Where this owner starts each shard: its checkpoint minus the grace its writer calls for (`previous_owner`,
        recorded in `previous`)."""
        marks = await self.store.read_checkpoints(added)
        marks.update(await self._handed_over_marks(marks, live))
        starts = {}
        for shard in added:
            mark = marks.get(shard)
            previous[shard] = previous_owner(mark.owner if mark else None, live, self.member)
            grace_s = resume_grace_s(previous[shard], self.cfg.resume_grace_s)
            start = resume_from(mark.fired_through if mark else None, now, grace_s)
            if shard in self.table.owned:
                self.table.owned[shard] = replace(self.table.owned[shard], start=start)
            starts[shard] = start
        return starts

    async def _handed_over_marks(self, marks: dict[int, Checkpoint], live: frozenset[str]) -> dict[int, Checkpoint]:
        """The marks of shards taken from a live member that has not tagged them yet, read again until it has (at most
        `HANDOVER_MARK_WAIT_S`): it tags them when the move reaches it, about when we read, and its last untagged mark
        may be a checkpoint step (60 s) old, every run since sent again by us. What is still untagged then is resumed
        from that mark with the handover's grace all the same: the member was alive, and its mark is a floor of
        what it had acknowledged."""
        waiting = {s for s, m in marks.items() if previous_owner(m.owner, live, self.member) is Previous.LIVE}
        found: dict[int, Checkpoint] = {}
        deadline = self.clock.monotonic() + HANDOVER_MARK_WAIT_S
        while waiting and self.clock.monotonic() < deadline:
            await self.clock.sleep(HANDOVER_MARK_POLL_S)
            try:
                fresh = await self.store.read_checkpoints(waiting)
            except Exception as exc:  # the marks read first still hold
                log.warning("reading the handed-over marks again failed: %s", exc)
                break
            for shard, mark in fresh.items():
                if previous_owner(mark.owner, live, self.member) is not Previous.LIVE:
                    found[shard] = mark
                    waiting.discard(shard)
        return found

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
