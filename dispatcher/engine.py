"""The dispatcher's engine: owned shards, the timing wheel, preload and horizon, near-term intake, the rescan,
the fire loop and the fenced checkpoints. ZooKeeper is driven from `dispatcher.membership`; the decisions are
the pure functions of `dispatcher.ownership`, `dispatcher.preload` and `dispatcher.firing`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatcher import firing
from dispatcher.firing import RecentlyFired, Watermarks, fire_order, needs_chain
from dispatcher.ownership import (
    LEAVING_TAG,
    OwnershipChange,
    is_newer,
    may_fire,
    owner_tag,
    plan_ownership,
    resume_from,
)
from dispatcher.preload import Key, accept_near, key_of, loadable_until, plan_inserts
from schemas.messages import DueRun, ShardAssignment, encode, topic_names
from tickwheel import metrics
from tickwheel.bus.ports import NearTermFeed, Publisher
from tickwheel.coordination.zookeeper import SessionState
from tickwheel.core.ids import epoch_ms
from tickwheel.core.wheel import TimingWheel
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store import buckets
from tickwheel.store.chain import chain
from tickwheel.store.ports import DispatcherStore
from tickwheel.tenancy import TenantCache

log = logging.getLogger(__name__)

RETRY_SEND_MS = 1000
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class ShardState:
    start: datetime
    """Where this owner began reading the shard (its checkpoint minus the grace)."""
    scanned: bool = False
    """The first scan is done: the shard is covered up to the loaded horizon and may be checkpointed."""


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
        self.cfg = settings.dispatcher
        self.store = store
        self.producer = producer
        self.near = near
        self.name = name
        self.topics = topic_names(settings.kafka.topic_prefix)
        self.tenants = TenantCache(store)  # the run retention of the runs chaining writes
        self._clock, self._monotonic, self._sleep = clock, monotonic, sleep
        self.member: str | None = None
        self.assignment: ShardAssignment | None = None
        self.epoch = 0
        self.owned: dict[int, ShardState] = {}
        self.loaded_until: datetime | None = None
        self.wheel: TimingWheel[Key, DueRun] = TimingWheel(start_ms=self.now_ms())
        self.keys_by_shard: dict[int, set[Key]] = defaultdict(set)
        self.watermarks = Watermarks()
        self.recent = RecentlyFired()
        self.load_per_s: Counter[int] = Counter()
        self.fired_through_ms = self.now_ms()
        self.written: dict[int, int] = {}
        self.session = SessionState.CONNECTED
        self.paused = True  # until registered
        self.leaving = False
        self.last_alive = monotonic()
        self.fired_count = 0
        self._wake = asyncio.Event()
        self._reconcile = asyncio.Event()
        self._sleep_until_ms = 0
        # One send gate per lane: asyncio's semaphore is FIFO, so with one gate an urgent row due just after a
        # bulk burst waited behind every bulk send (16-23 s at a 25k-100k peak, BENCHMARKS.md "Peak").
        self._gates = {lane: asyncio.Semaphore(self.cfg.fire_concurrency) for lane in firing.LANE_RANK}
        self._scan_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- clocks ---------------------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        for loop in (self._fire_loop, self._reconcile_loop, self._near_loop):
            self._spawn(loop())
        cfg = self.cfg
        self._spawn(self._every(cfg.scan_interval_s, self.extend_horizon, "extending the horizon"))
        self._spawn(self._every(cfg.rescan_interval_s, self.rescan, "rescan"))
        self._spawn(self._every(cfg.checkpoint_interval_s, self.checkpoint, "checkpoint"))

    async def _every(self, interval_s: float, step: Callable[[], Awaitable[object]], what: str) -> None:
        """Run `step` every `interval_s`; a failure is logged and the next interval tries again (the horizon,
        the rescan and the checkpoints: each is safe to repeat and catches up on its next run)."""
        while True:
            await self._sleep(interval_s)
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
        return self.member is not None and self.can_fire()

    # -- what membership tells the engine -------------------------------------------------------------------
    def set_member(self, member: str | None) -> None:
        self.member = member
        self._reconcile.set()

    def offer(self, assignment: ShardAssignment) -> None:
        if is_newer(assignment, self.assignment):
            self.assignment = assignment
            self._reconcile.set()

    def on_session(self, state: SessionState) -> None:
        """SUSPENDED: stop firing now, keep the wheel. LOST: drop every range and the wheel. CONNECTED: resume."""
        self.session = state
        if state is SessionState.LOST:
            self.drop_all()
        if state is SessionState.CONNECTED:
            self._wake.set()

    def confirm_alive(self) -> None:
        self.last_alive = self._monotonic()
        self.paused = False

    def can_fire(self) -> bool:
        since = self._monotonic() - self.last_alive
        return may_fire(self.session, self.paused, since, self.settings.zookeeper.session_timeout_s)

    def drop_all(self) -> None:
        log.warning("dropping all %d owned shards and the wheel", len(self.owned))
        self.member = None
        self.paused = True
        self.owned.clear()
        self.keys_by_shard.clear()
        self.watermarks.clear()
        self.written.clear()
        self.wheel = TimingWheel(start_ms=self.now_ms())
        self.loaded_until = None
        metrics.owned_shards.set(0)
        metrics.wheel_size.set(0)

    # -- ownership ------------------------------------------------------------------------------------------
    async def _reconcile_loop(self) -> None:
        while True:
            await self._reconcile.wait()
            self._reconcile.clear()
            if self.leaving:  # our shards stay ours until their new owners fence us (hand_over)
                continue
            try:
                await self.apply(plan_ownership(frozenset(self.owned), self.assignment, self.member))
            except Exception:
                log.exception("applying the assignment failed; retrying")
                await self._sleep(1.0)
                self._reconcile.set()

    async def apply(self, change: OwnershipChange) -> None:
        async with self._scan_lock:
            self.epoch = change.epoch
            for shard in change.removed:
                self._drop_shard(shard)
            if change.removed and not change.added:
                await self.near.retarget(set(self.owned))
            if change.added:
                await self._acquire(change.added)
            if change.added or change.removed:
                log.info(
                    "epoch %d: own %d shards (+%d -%d)",
                    change.epoch,
                    len(self.owned),
                    len(change.added),
                    len(change.removed),
                )
            metrics.owned_shards.set(len(self.owned))

    async def begin_leaving(self) -> None:
        """A rolling restart: keep firing the shards we own, take no new assignment, and write our watermarks
        tagged as handed over (before anyone is told, so the new owners read them: they resume with seconds of
        grace instead of minutes)."""
        self.leaving = True
        with contextlib.suppress(Exception):  # a mark not written only means a longer re-fire by the new owner
            await self.checkpoint(force=True)

    async def hand_over(self, timeout_s: float, poll_s: float = 0.25) -> int:
        """Leaving (after `begin_leaving`): keep firing each shard until its new owner has taken it: checkpointed
        under a newer epoch a watermark past the instant the handover began, so it has sent the runs it re-fires
        from our mark (minus the grace) and fires the current ones. Both fire meanwhile (the claim makes the
        second call harmless); nobody fires nothing. Returns how many shards nobody took in time."""
        began = self.now()
        deadline = self._monotonic() + timeout_s
        while self.owned and self._monotonic() < deadline:
            try:
                marks = await self.store.read_checkpoints(set(self.owned))
            except Exception as exc:
                log.warning("reading checkpoints during the handover failed: %s", exc)
                marks = {}
            for shard, mark in marks.items():
                if mark.owner_epoch > self.epoch and mark.fired_through >= began and shard in self.owned:
                    self._drop_shard(shard)
            if self.owned:
                await self._sleep(poll_s)
        log.info("handover done: %d shards left without a new owner", len(self.owned))
        return len(self.owned)

    def _drop_shard(self, shard: int) -> None:
        self.owned.pop(shard, None)
        for key in self.keys_by_shard.pop(shard, set()):
            self.wheel.cancel(key)
        self.watermarks.drop(shard)
        self.written.pop(shard, None)

    async def _acquire(self, added: frozenset[int]) -> None:
        now = self.now()
        marks = await self.store.read_checkpoints(added)
        if self.loaded_until is None:
            self.loaded_until = loadable_until(now, self.cfg.preload_horizon_s)
        for shard in added:
            mark = marks.get(shard)
            handed_over = mark is not None and mark.owner.endswith(LEAVING_TAG)
            start = resume_from(
                mark.fired_through if mark else None, now, self.cfg.resume_grace_s, handed_over=handed_over
            )
            self.owned[shard] = ShardState(start=start)
        started = time.perf_counter()
        try:
            await self.near.retarget(set(self.owned))  # end offsets before the scan
            runs = await self._read({s: self.owned[s].start for s in added}, self.loaded_until)
        except BaseException:
            for shard in added:
                self._drop_shard(shard)
            raise
        self._insert_all(runs)
        for shard in added:
            if shard in self.owned:
                self.owned[shard] = replace(self.owned[shard], scanned=True)
        metrics.preload_seconds.observe(time.perf_counter() - started)

    async def _read(self, since: dict[int, datetime], until: datetime) -> list[DueRun]:
        gate = asyncio.Semaphore(32)

        async def one(shard: int, start: datetime) -> list[DueRun]:
            async with gate:
                return await self.store.read_range(shard, start, until)

        pages = await asyncio.gather(*(one(s, start) for s, start in since.items() if start < until))
        return [run for page in pages for run in page]

    # -- the wheel ------------------------------------------------------------------------------------------
    def is_known(self, key: Key, shard: int) -> bool:
        return key in self.wheel or key in self.recent or self.watermarks.holds(shard, key)

    def _insert_all(self, runs: list[DueRun]) -> int:
        planned, added = plan_inserts(runs, self.load_per_s, self.cfg.capacity_per_s)
        self.load_per_s.update(added)
        inserted = sum(self._insert(fire_ms, run) for fire_ms, run in planned)
        metrics.wheel_size.set(len(self.wheel))
        return inserted

    def _insert(self, fire_ms: int, run: DueRun) -> bool:
        key = key_of(run)
        if run.shard not in self.owned or self.is_known(key, run.shard):
            return False
        self.wheel.insert(key, fire_ms, run)
        self.keys_by_shard[run.shard].add(key)
        if fire_ms != run.fire_at_ms:
            metrics.spread.inc()
            self.watermarks.hold(run.shard, key, run.fire_at_ms)
        if fire_ms < self._sleep_until_ms:
            self._wake.set()
        return True

    # -- horizon, near-term, rescan -------------------------------------------------------------------------
    async def extend_horizon(self) -> None:
        async with self._scan_lock:
            now = self.now()
            target = loadable_until(now, self.cfg.preload_horizon_s)
            previous = self.loaded_until
            if previous is None or target <= previous:
                return
            self.loaded_until = target  # before reading: announcements for these minutes are taken from now on
            started = time.perf_counter()
            try:
                runs = await self._read({s: max(previous, st.start) for s, st in self.owned.items()}, target)
            except BaseException:
                self.loaded_until = previous
                raise
            self._insert_all(runs)
            minutes = max(1, (target - previous) // MINUTE)
            for _ in range(minutes):
                metrics.preload_seconds.observe((time.perf_counter() - started) / minutes)
            self._prune(now)

    def _prune(self, now: datetime) -> None:
        now_ms = epoch_ms(now)
        self.recent.prune(now_ms)
        oldest = now_ms // 1000 - 120
        for second in [s for s in self.load_per_s if s < oldest]:
            del self.load_per_s[second]

    async def _near_loop(self) -> None:
        while True:
            try:
                runs = await self.near.poll()
            except Exception as exc:
                log.warning("near-term poll failed: %s", exc)
                await self._sleep(1.0)
                continue
            if not runs:
                if not self.near.positions:  # nothing assigned: poll returns at once
                    await self._sleep(0.1)
                continue
            self.take_near(runs)

    def take_near(self, runs: list[DueRun]) -> None:
        until_ms = epoch_ms(self.loaded_until) if self.loaded_until else None
        accepted = [run for run in runs if accept_near(run, self.owned, until_ms)]
        inserted = self._insert_all(accepted)
        metrics.near_received.labels(result="inserted").inc(inserted)
        metrics.near_received.labels(result="duplicate").inc(len(accepted) - inserted)
        metrics.near_received.labels(result="ignored").inc(len(runs) - len(accepted))

    async def rescan(self) -> int:
        """Read the current minute again; anything neither in the wheel nor fired is a miss caught late."""
        async with self._scan_lock:
            if self.loaded_until is None:
                return 0
            minute = self.now().replace(second=0, microsecond=0)
            until = min(minute + MINUTE, self.loaded_until)
            spans = {s: max(minute, st.start) for s, st in self.owned.items() if st.scanned}
            runs = await self._read(spans, until)
            # Lease checks due a minute or more after their claim are left for the rescan by design (never
            # announced: `NearAnnouncer.rescan_finds`); only other rows found here were missed.
            self._insert_all([run for run in runs if run.kind == "lease_check"])
            found = self._insert_all([run for run in runs if run.kind != "lease_check"])
        if found:
            metrics.rescan_found.inc(found)
            log.warning("rescan found %d runs that neither the preload nor the near-term topic delivered", found)
        return found

    # -- firing ---------------------------------------------------------------------------------------------
    async def _fire_loop(self) -> None:
        while True:
            next_due = self.fire_due() if self.can_fire() else None
            delay_ms = 250 if next_due is None else min(250, max(0, next_due - self.now_ms()))
            self._sleep_until_ms = self.now_ms() + delay_ms
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)

    def fire_due(self) -> int | None:
        """Send everything the wheel holds due by now (each send in its own task, see `settle`); returns when the
        next row is due (ms), None when the wheel is empty."""
        now_ms = self.now_ms()
        batch = self.wheel.advance(now_ms)
        self.fired_through_ms = now_ms
        if batch:
            self._dispatch(batch)
        metrics.wheel_size.set(len(self.wheel))
        return self.wheel.next_due_ms()

    async def settle(self) -> None:
        """Wait until the sends `fire_due` started are done (tests; the loops never wait for them)."""
        while fires := [t for t in self._tasks if t.get_name().startswith("fire ")]:
            await asyncio.wait(fires)

    def _dispatch(self, batch: list[tuple[int, Key, DueRun]]) -> None:
        for _due_ms, key, run in fire_order(batch):
            self.keys_by_shard[run.shard].discard(key)
            self.watermarks.hold(run.shard, key, run.fire_at_ms)
            self._spawn(self._fire(key, run), name=f"fire {run.run_id}")

    async def _fire(self, key: Key, run: DueRun) -> None:
        async with self._gates.get(run.lane, self._gates["default"]):
            if run.shard not in self.owned:
                self.watermarks.release(run.shard, key)
                return
            held_back = needs_chain(run) and not await self._chain(run)  # by the job's catch-up or overlap
            if held_back or (run.kind == "lease_check" and not await self._lease_lapsed(run)):
                self.watermarks.release(run.shard, key)
                self.recent.add(key)
                return
            if not self.can_fire():  # paused while waiting: put it back, it goes out on resume (or is dropped)
                self._requeue(key, run, run.fire_at_ms)
                return
            fired_at_ms = self.now_ms()
            try:
                await self.producer.send(
                    self.topics[run.lane],
                    encode(firing.fired(run, fired_at_ms)),
                    key=str(run.job_id).encode(),
                    headers=self._headers(),
                )
            except Unavailable as exc:
                log.warning("send failed, retrying: %s", exc, extra=_context(run))
                self._requeue(key, run, self.now_ms() + RETRY_SEND_MS)
                return
        self.fired_count += 1
        self.watermarks.release(run.shard, key)
        self.recent.add(key)
        metrics.fired.labels(lane=run.lane, kind=run.kind).inc()
        metrics.fire_lag.labels(lane=run.lane).observe(max(0, fired_at_ms - run.fire_at_ms) / 1000)

    async def _lease_lapsed(self, run: DueRun) -> bool:
        """A lease check goes to a worker only if its attempt still runs past the lease; if the run cannot be read,
        it goes anyway (the worker checks again)."""
        try:
            lapsed = await self.store.lease_lapsed(run.run_id, run.attempt, self.now())
        except Unavailable as exc:
            log.warning("lease check read failed, sending it on: %s", exc, extra=_context(run))
            return True
        metrics.lease_checks.labels(result="lapsed" if lapsed else "kept").inc()
        return lapsed

    def _headers(self) -> list[tuple[str, bytes]]:
        """Who fired, under which assignment epoch: lets a reader tell a stale owner's fire from a new one."""
        return [
            ("dispatcher", self.name.encode()),
            ("member", (self.member or "").encode()),
            ("epoch", b"%d" % self.epoch),
        ]

    def _requeue(self, key: Key, run: DueRun, due_ms: int) -> None:
        if run.shard in self.owned and self.wheel.insert(key, due_ms, run):
            self.keys_by_shard[run.shard].add(key)
        elif run.shard not in self.owned:
            self.watermarks.release(run.shard, key)

    async def _chain(self, run: DueRun) -> bool:
        """Chain the run's job; False when its catch-up or overlap policy holds this run back."""
        cfg = self.cfg
        try:
            retention_s = await self.tenants.run_retention_s(run.tenant_id, self.settings.retention.runs_days)
            step = await chain(
                self.store, run, self.now(), retention_s=retention_s,
                missed_after_s=cfg.missed_after_s, recheck_s=cfg.overlap_recheck_s,
            )  # fmt: skip
        except Exception as exc:  # the run still fires; the sweeper repairs the chain and says so
            metrics.chained.labels(result="error").inc()
            log.warning("chaining failed: %s", exc, extra=_context(run))
            return True
        metrics.chained.labels(result=step.result.value).inc()
        # The next run (or this one, buffered) may fall inside the horizon already loaded: take it directly.
        written = [r for r in (step.following, step.later) if r is not None]
        if written and self.loaded_until is not None:
            until_ms = epoch_ms(self.loaded_until)
            self._insert_all([buckets.due_run_for(r) for r in written if epoch_ms(r.fire_at) < until_ms])
        return step.send

    # -- checkpoints ----------------------------------------------------------------------------------------
    async def checkpoint(self, *, force: bool = False) -> dict[int, bool]:
        """Write the watermarks that moved a checkpoint step (`force`: every one that moved at all)."""
        if not self.can_fire() or self.member is None:
            return {}
        marks = {s: self.watermarks.mark(s, self.fired_through_ms) for s, st in self.owned.items() if st.scanned}
        if marks:
            metrics.checkpoint_lag.set(max(0, self.now_ms() - min(marks.values())) / 1000)
        due = firing.checkpoints_due(marks, self.written, 1 if force else int(self.cfg.checkpoint_step_s * 1000))
        if not due:
            return {}
        at = {s: datetime.fromtimestamp(ms / 1000, UTC) for s, ms in due.items()}
        epoch = self.epoch
        results = await self.store.advance_checkpoints(at, epoch, owner_tag(self.member, self.leaving), self.now())
        for shard, applied in results.items():
            if applied:
                self.written[shard] = due[shard]
            elif shard in self.owned and not self.leaving:  # leaving: hand_over drops it once taken over
                log.warning("shard %d is fenced by a newer epoch than %d: dropping it", shard, epoch)
                self._drop_shard(shard)
        return results


def _context(run: DueRun) -> dict[str, Any]:
    return {"tenant": run.tenant_id, "job_id": str(run.job_id), "run_id": str(run.run_id), "attempt": run.attempt}
