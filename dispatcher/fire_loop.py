"""Emptying the wheel: the fire loop sends each row when it is due, on its lane's topic, a window of sends per
lane; a recurring job is chained as its run fires, a lease check goes out only while the lease has lapsed, and a
send the bus refused or a pause puts the row back. The decisions are `dispatcher.firing`'s."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from dispatcher import firing
from dispatcher.firing import fire_order, needs_chain
from dispatcher.owner import Ownership
from dispatcher.preload import Key
from dispatcher.shards import Clock, ShardTable
from schemas.messages import DueRun, encode, topic_names
from tickwheel import metrics
from tickwheel.bus.near import announce
from tickwheel.bus.ports import Publisher
from tickwheel.core.ids import epoch_ms
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store import buckets
from tickwheel.store.chain import Step, chain
from tickwheel.store.ports import DispatcherStore
from tickwheel.tenancy import TenantCache

log = logging.getLogger(__name__)

RETRY_SEND_MS = 1000
CHAIN_RETRY_FIRST_S = 0.5  # a failed chaining is tried again after this, then twice as long each time
CHAIN_RETRY_MAX_S = 8.0
IDLE_MS = 250
"""The longest the fire loop sleeps: it looks at the wheel (and whether it may fire) at least this often."""

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class Firing:
    """Sends the wheel's due rows, a window of sends per lane (each send a task started through `spawn`, so the
    engine can stop them)."""

    def __init__(
        self,
        settings: Settings,
        table: ShardTable,
        store: DispatcherStore,
        producer: Publisher,
        ownership: Ownership,
        clock: Clock,
        spawn: Spawn,
        *,
        name: str,
    ):
        self.cfg = settings.dispatcher
        self.runs_days = settings.retention.runs_days
        self.tenants = TenantCache(store)  # the run retention of the runs chaining writes
        self.table, self.store, self.producer, self.ownership, self.clock = table, store, producer, ownership, clock
        self.name = name
        self.topics = topic_names(settings.kafka.topic_prefix)
        self.near_partitions, self.shards = settings.kafka.near_partitions, settings.shards
        self.fired_count = 0
        self.last_round_ms = 0  # when `fire_due` last sent a batch: the next round waits `fire_grain_ms` after it
        self._spawn = spawn
        self._sending: set[asyncio.Task[Any]] = set()
        # Per lane, the rows taken from the wheel and not yet sending, and how many are sending (at most
        # `fire_concurrency`): a send starts as another ends. One window per lane: with one, an urgent row due
        # just after a bulk burst waited behind every bulk send (16-23 s at a 25k-100k peak, BENCHMARKS.md
        # "Peak"). Rows wait in a queue rather than as tasks: a task per row of a 100k peak made each round of
        # the loop as long as the rows it took cost, so the next round took (and cost) four times as many, and
        # an urgent row due in the meantime fired 6 s late (BENCHMARKS.md "The peak's urgent lane", session 25).
        self._queued: dict[str, deque[tuple[Key, DueRun]]] = {lane: deque() for lane in firing.LANE_RANK}
        self._in_flight = dict.fromkeys(firing.LANE_RANK, 0)

    async def loop(self) -> None:
        """Fire what is due, then sleep until the next row is due, but not before `fire_grain_ms` after the last
        round that sent anything (at most IDLE_MS; woken by a row due before then)."""
        table = self.table
        while True:
            next_due = self.fire_due() if self.ownership.can_fire() else None
            now_ms = self.clock.now_ms()
            next_round_ms = None if next_due is None else max(next_due, self.last_round_ms + self.cfg.fire_grain_ms)
            delay_ms = IDLE_MS if next_round_ms is None else min(IDLE_MS, max(0, next_round_ms - now_ms))
            table.sleep_until_ms = now_ms + delay_ms
            table.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(table.wake.wait(), delay_ms / 1000)

    def fire_due(self) -> int | None:
        """Send everything the wheel holds due by now (each send in its own task, see `settle`); returns when the
        next row is due (ms), None when the wheel is empty."""
        table = self.table
        now_ms = self.clock.now_ms()
        batch = table.wheel.advance(now_ms)
        table.fired_through_ms = now_ms
        if batch:
            self.last_round_ms = now_ms
            self.dispatch(batch)
        metrics.wheel_size.set(len(table.wheel))
        metrics.fire_queued.set(self.queued)  # a peak's backlog: due, and behind the sends in flight
        return table.wheel.next_due_ms()

    async def settle(self) -> None:
        """Wait until the rows `fire_due` took are sent (tests; the loops never wait for them)."""
        while self._sending:
            await asyncio.wait(list(self._sending))

    @property
    def queued(self) -> int:
        """Rows taken from the wheel that wait for their lane's window."""
        return sum(len(rows) for rows in self._queued.values())

    def dispatch(self, batch: list[tuple[int, Key, DueRun]]) -> None:
        """Queue a due batch on its lanes and start what their windows allow, urgent lane first; each row is held
        in its watermark until acked."""
        table, queued = self.table, self._queued
        for _due_ms, key, run in fire_order(batch):
            table.keys_by_shard[run.shard].discard(key)
            table.watermarks.hold(run.shard, key, run.fire_at_ms)
            queued[run.lane if run.lane in queued else "default"].append((key, run))
        for lane in queued:
            self._start_sends(lane)

    def _start_sends(self, lane: str) -> None:
        """Start sends from the lane's queue up to its window."""
        rows, limit = self._queued[lane], self.cfg.fire_concurrency
        while rows and self._in_flight[lane] < limit:
            key, run = rows.popleft()
            self._in_flight[lane] += 1
            task = self._spawn(self._fire(key, run), f"fire {run.run_id}")
            self._sending.add(task)
            task.add_done_callback(functools.partial(self._sent, lane))

    def _sent(self, lane: str, task: asyncio.Task[Any]) -> None:
        self._in_flight[lane] -= 1
        if not task.cancelled():  # cancelled: the engine is stopping, and starts nothing more
            # before the task leaves `_sending`: `settle` must never see the set empty while rows still queue
            self._start_sends(lane)
        self._sending.discard(task)

    async def _fire(self, key: Key, run: DueRun) -> None:
        try:
            await self._fire_row(key, run)
        except Exception:
            # Not an outage (`Unavailable` is handled inside): a bug, or a value the bus or the store refused. Said
            # at once, with the row, and the row tried again later: it keeps its hold, so its shard's checkpoint
            # waits for it instead of passing a row that was never sent, and the error shows every retry.
            metrics.fire_errors.inc()
            log.exception("firing a row failed, trying again in %d ms", RETRY_SEND_MS, extra=_context(run))
            self._requeue(key, run, self.clock.now_ms() + RETRY_SEND_MS)

    async def _fire_row(self, key: Key, run: DueRun) -> None:
        table = self.table
        # A row queued when its shard was dropped lost its hold with it: whoever owns the shard next (this
        # dispatcher again, perhaps) reads the row again.
        if run.shard not in table.owned or not table.watermarks.holds(run.shard, key):
            table.watermarks.release(run.shard, key)
            return
        held_back = needs_chain(run) and not await self._chain(run)  # by the job's catch-up or overlap
        if held_back or (run.kind == "lease_check" and not await self._lease_lapsed(run)):
            table.watermarks.release(run.shard, key)
            table.recent.add(key)
            return
        if not self.ownership.can_fire():  # paused while waiting: put it back, out on resume (or dropped)
            self._requeue(key, run, run.fire_at_ms)
            return
        fired_at_ms = self.clock.now_ms()
        try:
            # No key: librdkafka sends one produce request per partition, so runs keyed by job spread a round
            # of ~15 over ~10 requests; unkeyed, its sticky partitioner gives the round one partition (one
            # request, one fetch answer), moving on every `sticky.partitioning.linger.ms`. Nothing reads the
            # key: a run's claim, not its partition, keeps two workers from calling it.
            await self.producer.send(
                self.topics[run.lane], encode(firing.fired(run, fired_at_ms)), headers=self._headers()
            )
        except Unavailable as exc:
            log.warning("send failed, retrying: %s", exc, extra=_context(run))
            self._requeue(key, run, self.clock.now_ms() + RETRY_SEND_MS)
            return
        self.fired_count += 1
        table.watermarks.release(run.shard, key)
        table.recent.add(key)
        metrics.child(metrics.fired, run.lane, run.kind).inc()
        metrics.child(metrics.fire_lag, run.lane).observe(max(0, fired_at_ms - run.fire_at_ms) / 1000)

    async def _lease_lapsed(self, run: DueRun) -> bool:
        """A lease check goes to a worker only if its attempt still runs past the lease; if the run cannot be read,
        it goes anyway (the worker checks again)."""
        try:
            lapsed = await self.store.lease_lapsed(run.run_id, run.attempt, self.clock.now())
        except Unavailable as exc:
            log.warning("lease check read failed, sending it on: %s", exc, extra=_context(run))
            return True
        metrics.lease_checks.labels(result="lapsed" if lapsed else "kept").inc()
        return lapsed

    def _headers(self) -> list[tuple[str, bytes]]:
        """Who fired, under which assignment epoch: lets a reader tell a stale owner's fire from a new one."""
        return [
            ("dispatcher", self.name.encode()),
            ("member", (self.ownership.member or "").encode()),
            ("epoch", b"%d" % self.ownership.epoch),
        ]

    def _requeue(self, key: Key, run: DueRun, due_ms: int) -> None:
        table = self.table
        if run.shard in table.owned and table.wheel.insert(key, due_ms, run):
            table.keys_by_shard[run.shard].add(key)
        elif run.shard not in table.owned:
            table.watermarks.release(run.shard, key)

    async def _chain(self, run: DueRun) -> bool:
        """Chain the run's job; False when its catch-up or overlap policy holds this run back. When Cassandra does
        not answer, the run fires anyway and the chaining is tried again in the background (`_chain_again`)."""
        try:
            step = await self._chain_step(run)
        except Unavailable as exc:
            metrics.chained.labels(result="error").inc()
            log.warning("chaining failed, trying again shortly: %s", exc, extra=_context(run))
            self._spawn(self._chain_again(run), f"chain {run.run_id}")
            return True
        except Exception as exc:  # the run still fires; the sweeper repairs the chain and says so
            metrics.chained.labels(result="error").inc()
            log.warning("chaining failed: %s", exc, extra=_context(run))
            return True
        metrics.chained.labels(result=step.result.value).inc()
        self._take_written(step)
        return step.send

    async def _chain_again(self, run: DueRun) -> None:
        """Chain a fired run whose chaining failed (a Cassandra node leaving or rejoining times its LWT out), with
        backoff, while the run is less than half of `missed_after_s` past its time: later, the job's catch-up
        policy could cancel the very run that was sent. The chaining's own conditions make a retry safe (an attempt
        that had applied leaves the job pointing past the run: STALE, nothing written). What is still not chained
        then is the sweeper's (after `coordinator.sweep_grace_s`), as before."""
        cfg = self.cfg
        wait_s = CHAIN_RETRY_FIRST_S
        give_up_ms = run.scheduled_at_ms + int(cfg.missed_after_s * 1000 / 2)
        while self.clock.now_ms() + wait_s * 1000 < give_up_ms and run.shard in self.table.owned:
            await self.clock.sleep(wait_s)
            try:
                step = await self._chain_step(run)
            except Unavailable as exc:
                log.warning("chaining failed again: %s", exc, extra=_context(run))
                wait_s = min(wait_s * 2, CHAIN_RETRY_MAX_S)
                continue
            metrics.chained.labels(result=f"retried_{step.result.value}").inc()
            self._take_written(step)
            return
        log.warning("chaining left to the sweeper", extra=_context(run))

    async def _chain_step(self, run: DueRun) -> Step:
        cfg = self.cfg
        retention_s = await self.tenants.run_retention_s(run.tenant_id, self.runs_days)  # the runs it writes keep it
        return await chain(
            self.store, run, self.clock.now(), retention_s=retention_s,
            missed_after_s=cfg.missed_after_s, recheck_s=cfg.overlap_recheck_s,
        )  # fmt: skip

    def _take_written(self, step: Step) -> None:
        """The next run (or this one, buffered) may fall inside the horizon already loaded: take it directly. Of a
        shard being handed over (moved away, or all of ours while leaving) it is announced too: its new owner may
        have read that minute already, and the row leaves our wheel with the shard (found by a rescan only)."""
        written = [r for r in (step.following, step.later) if r is not None]
        loaded_until = self.table.loaded_until
        if written and loaded_until is not None:
            until_ms = epoch_ms(loaded_until)
            self.table.insert_all([buckets.due_run_for(r) for r in written if epoch_ms(r.fire_at) < until_ms])
        ownership = self.ownership
        for run in written:
            if ownership.leaving or run.shard in ownership.moving:
                self._spawn(self._announce(buckets.due_run_for(run)), f"announce {run.run_id}")

    async def _announce(self, run: DueRun) -> None:
        """Put a chained row on the near-term topic (a failure is logged: the new owner's rescan finds the row)."""
        try:
            await announce(self.producer, self.topics["near"], run, partitions=self.near_partitions, shards=self.shards)
        except Unavailable as exc:
            log.warning("announcing a chained run of a shard handed over failed: %s", exc, extra=_context(run))


def _context(run: DueRun) -> dict[str, Any]:
    return {"tenant": run.tenant_id, "job_id": str(run.job_id), "run_id": str(run.run_id), "attempt": run.attempt}
