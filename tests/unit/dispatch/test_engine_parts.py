"""Each part of the dispatcher engine on its own, over one shard table, the in-memory store and bus and a clock the
test holds (no servers): the table keeps a row once and only for a shard owned; the ownership pauses on a
suspended session and hands a shard over only to a newer owner past the handover; the horizon takes announced
rows only inside what it loaded and puts the horizon back when a read fails; firing puts back a row whose send
must wait; the checkpointer tags a leaving owner's marks and keeps firing a shard it is handing over."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from dispatcher.checkpointer import Checkpointer
from dispatcher.fire_loop import Firing
from dispatcher.horizon import Horizon
from dispatcher.owner import HANDOVER_MARK_WAIT_S, Ownership
from dispatcher.ownership import HANDOVER_GRACE_S, LEAVING_TAG, OwnershipChange, plan_ownership
from dispatcher.preload import SHARDS_PER_READ, key_of
from dispatcher.shards import Clock, ShardState, ShardTable
from schemas.messages import DueRun, Lane, ShardAssignment, decode_due_run, topic_names
from tests.factories import job
from tests.unit.dispatch.reads import count_group_reads
from tickwheel.bus.memory import MemoryBus, MemoryNearFeed
from tickwheel.coordination.zookeeper import SessionState
from tickwheel.core.ids import epoch_ms
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store.chain import ChainResult, Step
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import RunKind

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)


class Parts:
    """The four parts over one table, as `Dispatcher` wires them, at a wall and monotonic clock the test moves."""

    def __init__(self, *, member: str = "m", store: MemoryStore | None = None, bus: MemoryBus | None = None) -> None:
        self.settings = Settings()
        self.member = member
        self.now, self.mono = NOW, 0.0
        self.store = store or MemoryStore()  # two engines over one store and bus: two dispatchers
        self.bus = bus or MemoryBus()
        k = self.settings.kafka
        self.near = MemoryNearFeed(self.bus, k.topic_prefix, k.near_partitions, self.settings.shards)
        self.clock = Clock(lambda: self.now.timestamp(), lambda: self.mono, self.no_sleep)
        self.table = ShardTable(self.clock, self.settings.dispatcher.capacity_per_s)
        cfg = self.settings.dispatcher
        self.horizon = Horizon(self.table, self.store, self.near, cfg, self.clock)
        self.ownership = Ownership(self.settings, self.table, self.store, self.near, self.horizon, self.clock)
        self.tasks: list[asyncio.Task[Any]] = []
        self.firing = Firing(
            self.settings, self.table, self.store, self.bus, self.ownership, self.clock, self.spawn, name=member
        )
        self.checkpointer = Checkpointer(self.table, self.store, self.ownership, cfg, self.clock)

    async def no_sleep(self, seconds: float) -> None:
        self.mono += seconds
        await asyncio.sleep(0)

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task

    async def own(self, *shards: int, epoch: int = 1) -> None:
        self.ownership.set_member(self.member)
        self.ownership.confirm_alive()
        await self.ownership.apply(OwnershipChange(epoch, frozenset(shards), frozenset(), frozenset()))


def row(shard: int, at: datetime, *, lane: Lane = "default") -> DueRun:
    ms = epoch_ms(at)
    return DueRun(
        run_id=uuid.uuid4(), job_id=uuid.uuid4(), tenant_id="t", shard=shard, attempt=0, kind="run", lane=lane,
        job_version=1, scheduled_at_ms=ms, fire_at_ms=ms, recurring=False,
    )  # fmt: skip


@pytest.fixture
def parts() -> Parts:
    return Parts()


# -- ShardTable ---------------------------------------------------------------------------------------------------
def test_the_table_holds_a_row_once_only_for_an_owned_shard_and_forgets_it_with_its_shard(parts: Parts) -> None:
    table = parts.table
    table.owned[3] = ShardState(start=NOW, scanned=True)
    mine, other = row(3, NOW + timedelta(seconds=5)), row(4, NOW + timedelta(seconds=5))
    assert table.insert_all([mine, other]) == 1
    assert table.insert_all([mine]) == 0  # in the wheel
    table.wheel.cancel(key_of(mine))
    table.watermarks.hold(3, key_of(mine), mine.fire_at_ms)
    assert table.insert_all([mine]) == 0  # in flight
    table.watermarks.release(3, key_of(mine))
    table.recent.add(key_of(mine))
    assert table.insert_all([mine]) == 0  # just fired
    assert table.insert_all([row(3, NOW + timedelta(seconds=6))]) == 1
    table.drop_shard(3)
    assert len(table.wheel) == 0 and 3 not in table.owned


def test_a_row_due_before_the_fire_loop_wakes_up_wakes_it(parts: Parts) -> None:
    table = parts.table
    table.owned[3] = ShardState(start=NOW, scanned=True)
    table.sleep_until_ms = epoch_ms(NOW + timedelta(seconds=10))
    table.insert_all([row(3, NOW + timedelta(seconds=20))])
    assert not table.wake.is_set()
    table.insert_all([row(3, NOW + timedelta(seconds=5))])
    assert table.wake.is_set()


# -- Ownership ----------------------------------------------------------------------------------------------------
async def test_a_suspended_session_stops_firing_at_once_and_a_lost_one_drops_every_shard(parts: Parts) -> None:
    await parts.own(1, 2)
    assert parts.ownership.can_fire()
    parts.ownership.on_session(SessionState.SUSPENDED)
    assert not parts.ownership.can_fire() and set(parts.table.owned) == {1, 2}  # the wheel is kept
    parts.ownership.on_session(SessionState.LOST)
    assert parts.table.owned == {} and parts.ownership.member is None and not parts.ownership.can_fire()


async def test_firing_stops_when_liveness_is_not_confirmed_within_the_alive_window(parts: Parts) -> None:
    await parts.own(1)
    parts.mono += parts.settings.dispatcher.alive_window_s - 0.1
    assert parts.ownership.can_fire()
    parts.mono += 0.2  # a stall past the window (far less than the session timeout): no fire until confirmed again
    assert not parts.ownership.can_fire()
    parts.ownership.confirm_alive()
    assert parts.ownership.can_fire()


async def test_a_shard_is_handed_over_only_once_a_newer_owner_has_checkpointed_past_the_handover(
    parts: Parts,
) -> None:
    await parts.own(1, 2, epoch=4)
    await parts.store.advance_checkpoints({1: NOW - timedelta(seconds=1)}, 5, "new", NOW)  # before it began
    await parts.store.advance_checkpoints({2: NOW}, 5, "new", NOW)
    assert await parts.ownership.hand_over(timeout_s=1.0, poll_s=0.25) == 1
    assert set(parts.table.owned) == {1}


async def test_an_acquisition_whose_read_failed_leaves_no_shard_half_owned(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down(*_: Any) -> list[DueRun]:
        raise Unavailable("cassandra down")

    monkeypatch.setattr(parts.store, "read_shards", down)
    with pytest.raises(Unavailable):
        await parts.own(1, 2)
    assert parts.table.owned == {}


async def test_a_take_over_puts_the_rows_due_now_in_the_wheel_before_it_reads_the_backlog(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, run = job(NOW)
    shards = range(3 * SHARDS_PER_READ)
    for shard in shards:
        await parts.store.advance_checkpoints({shard: NOW - timedelta(minutes=4)}, 1, "gone", NOW)
    due_now, backlog = replace(run, shard=5, run_id=uuid.uuid4()), replace(run, shard=6, run_id=uuid.uuid4())
    await parts.store.write_due_row(due_now, NOW - timedelta(seconds=2), 0, RunKind.RUN)
    await parts.store.write_due_row(backlog, NOW - timedelta(minutes=5), 0, RunKind.RUN)
    in_wheel_at_read: list[tuple[datetime, bool]] = []
    read_shards = parts.store.read_shards

    async def watched(group: list[int], since: datetime, until: datetime) -> list[DueRun]:
        known = any(key[0] == due_now.run_id for key in parts.table.keys_by_shard[5])
        in_wheel_at_read.append((since, known))
        return await read_shards(group, since, until)

    monkeypatch.setattr(parts.store, "read_shards", watched)
    await parts.own(*shards, epoch=2)
    grace = timedelta(seconds=parts.settings.dispatcher.resume_grace_s)
    backlog_reads = [known for since, known in in_wheel_at_read if since < NOW - timedelta(minutes=1)]
    assert backlog_reads and all(backlog_reads)  # every read of the backlog went out after the row due now was in
    assert len(in_wheel_at_read) - len(backlog_reads) <= 3 * 3  # the minutes around now: three per group of shards
    ids = {key[0] for key in parts.table.keys_by_shard[5] | parts.table.keys_by_shard[6]}
    assert ids == {due_now.run_id, backlog.run_id}  # the backlog since checkpoint minus grace is still read
    assert all(st.scanned and st.start == NOW - timedelta(minutes=4) - grace for st in parts.table.owned.values())


async def test_a_take_over_of_a_handed_over_shard_reads_nothing_before_its_mark_minus_the_handover_grace(
    parts: Parts,
) -> None:
    _, run = job(NOW)
    await parts.store.advance_checkpoints({1: NOW - timedelta(seconds=2)}, 1, f"old{LEAVING_TAG}", NOW)
    fired, pending = replace(run, shard=1, run_id=uuid.uuid4()), replace(run, shard=1, run_id=uuid.uuid4())
    await parts.store.write_due_row(fired, NOW - timedelta(seconds=15), 0, RunKind.RUN)  # inside the lookback
    await parts.store.write_due_row(pending, NOW - timedelta(seconds=5), 0, RunKind.RUN)
    await parts.own(1, epoch=2)
    assert {key[0] for key in parts.table.keys_by_shard[1]} == {pending.run_id}
    assert parts.table.owned[1].start == NOW - timedelta(seconds=7)


# -- Horizon ------------------------------------------------------------------------------------------------------
async def test_an_announced_row_is_taken_only_for_an_owned_shard_inside_the_loaded_horizon(parts: Parts) -> None:
    await parts.own(1)
    loaded_until = parts.table.loaded_until
    assert loaded_until is not None
    inside, beyond, elsewhere = row(1, NOW + timedelta(seconds=5)), row(1, loaded_until), row(2, NOW)
    parts.horizon.take_near([inside, beyond, elsewhere])
    assert [key for _, key, _ in parts.table.wheel.advance(epoch_ms(loaded_until) + 1)] == [key_of(inside)]


async def test_a_horizon_read_that_failed_leaves_the_horizon_where_it_was(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    await parts.own(1)
    before = parts.table.loaded_until

    async def down(*_: Any) -> list[DueRun]:
        raise Unavailable("cassandra down")

    monkeypatch.setattr(parts.store, "read_shards", down)
    parts.now += timedelta(minutes=3)
    with pytest.raises(Unavailable):
        await parts.horizon.extend()
    assert parts.table.loaded_until == before  # the next extension reads these minutes again


async def test_a_scan_reads_its_shards_in_groups_and_each_shard_only_from_its_own_start(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, run = job(NOW)
    shards, late, behind = range(2 * SHARDS_PER_READ + 8), 7, 3 * SHARDS_PER_READ
    for shard in [*shards, behind]:
        at = NOW - timedelta(minutes=3) if shard == behind else NOW + timedelta(seconds=5)
        await parts.store.write_due_row(replace(run, shard=shard, run_id=uuid.uuid4()), at, 0, RunKind.RUN)
    reads = count_group_reads(parts.store, monkeypatch)
    until = NOW + timedelta(minutes=1)
    since = {shard: NOW for shard in shards} | {late: NOW + timedelta(seconds=10), behind: NOW - timedelta(minutes=5)}
    runs = await parts.horizon.read(since | {999: until}, until)  # 999: nothing before `until`, not read
    assert sorted(r.shard for r in runs) == sorted([*(s for s in shards if s != late), behind])
    assert len(reads) == 4  # three groups of this minute's starts (the late shard's in one of them), one behind
    assert sorted(s for group in reads for s in group) == sorted([*shards, behind])


# -- Firing -------------------------------------------------------------------------------------------------------
def fired_jobs(parts: Parts) -> list[uuid.UUID]:
    """The jobs of the runs sent so far, in order."""
    return [decode_due_run(m.value).job_id for m in parts.bus.messages]


async def test_lane_messages_carry_no_key_so_a_round_leaves_in_one_produce_request(parts: Parts) -> None:
    # librdkafka sends one produce request per partition: keyed by job, a round of 15 runs went out as ~10 requests;
    # without a key its sticky partitioner puts the round's messages on one partition.
    await parts.own(1)
    parts.table.insert_all([row(1, NOW), row(1, NOW)])
    parts.firing.dispatch(parts.table.wheel.advance(epoch_ms(NOW)))
    await parts.firing.settle()
    assert [m.key for m in parts.bus.messages] == [None, None]


async def test_a_row_whose_send_must_wait_is_put_back_and_goes_out_on_resume(parts: Parts) -> None:
    await parts.own(1)
    due = row(1, NOW)
    parts.table.insert_all([due])
    parts.ownership.paused = True  # paused after the batch left the wheel, before its send
    parts.firing.dispatch(parts.table.wheel.advance(epoch_ms(NOW)))
    await parts.firing.settle()
    assert parts.bus.messages == [] and len(parts.table.wheel) == 1
    parts.ownership.confirm_alive()
    parts.firing.fire_due()
    await parts.firing.settle()
    assert fired_jobs(parts) == [due.job_id]
    assert parts.firing.fired_count == 1


async def test_the_fire_loop_waits_its_grain_after_a_round_so_rows_due_within_it_leave_together(parts: Parts) -> None:
    await parts.own(1)
    grain = parts.settings.dispatcher.fire_grain_ms  # 50 ms
    now, first, second = (row(1, NOW + timedelta(milliseconds=ms)) for ms in (0, 5, grain - 1))
    parts.table.insert_all([now, first, second])
    loop = asyncio.create_task(parts.firing.loop())
    try:
        await asyncio.sleep(0)
        await parts.firing.settle()
        assert fired_jobs(parts) == [now.job_id]  # never early
        assert parts.table.sleep_until_ms == epoch_ms(NOW) + grain  # not the 5 ms until the next row
        parts.now = NOW + timedelta(milliseconds=3)
        extra = row(1, NOW + timedelta(milliseconds=grain - 1))
        parts.table.insert_all([extra])  # due before the loop would wake: wakes it
        for _ in range(10):  # the loop's wait (a wait_for) ends a few steps after the wake
            await asyncio.sleep(0)
        assert len(parts.bus.messages) == 1
        assert parts.table.sleep_until_ms == epoch_ms(NOW) + grain  # the grain counts from the round, not the wake
        parts.now = NOW + timedelta(milliseconds=grain)
        parts.table.wake.set()
        for _ in range(10):
            await asyncio.sleep(0)
        await parts.firing.settle()
        assert set(fired_jobs(parts)[1:]) == {r.job_id for r in (first, second, extra)}
        assert len(parts.bus.messages) == 4  # in one round
    finally:
        loop.cancel()


async def test_a_burst_waits_in_its_lanes_queue_not_as_a_task_per_row_and_leaves_once_each(parts: Parts) -> None:
    # A task per row of a 100k peak made each round of the loop as long as its rows cost, the next round four times
    # larger: an urgent row due meanwhile fired 6 s late (BENCHMARKS.md, session 25).
    await parts.own(1)
    window = parts.settings.dispatcher.fire_concurrency
    burst = [row(1, NOW + timedelta(milliseconds=i % 7), lane="bulk") for i in range(window + 300)]
    parts.table.insert_all(burst)
    parts.now = NOW + timedelta(milliseconds=10)
    parts.firing.fire_due()
    assert sum(not task.done() for task in parts.tasks) == window
    assert parts.firing.queued == 300 and REGISTRY.get_sample_value("tickwheel_fire_queued") == 300
    waiting = burst[-1]  # due last: queued, so known (a rescan must not load it again) and holding the mark
    assert parts.table.is_known(key_of(waiting), 1)
    assert parts.table.watermarks.mark(1, epoch_ms(NOW) + 10) <= waiting.fire_at_ms
    await parts.firing.settle()
    assert sorted(fired_jobs(parts)) == sorted(r.job_id for r in burst) and parts.firing.queued == 0
    assert parts.table.watermarks.mark(1, epoch_ms(NOW) + 10) == epoch_ms(NOW) + 10


async def test_a_row_queued_when_its_shard_is_dropped_is_not_sent_even_if_the_shard_comes_back(parts: Parts) -> None:
    await parts.own(1, 2)
    window = parts.settings.dispatcher.fire_concurrency
    burst = [row(1, NOW) for _ in range(window)]
    other = row(2, NOW + timedelta(milliseconds=1))  # behind the burst in the default lane's queue
    parts.table.insert_all([*burst, other])
    parts.firing.dispatch(parts.table.wheel.advance(epoch_ms(NOW) + 1))
    assert parts.firing.queued == 1
    parts.table.drop_shard(2)
    parts.table.owned[2] = ShardState(start=NOW, scanned=True)  # taken back: its scan reads the row again
    await parts.firing.settle()
    assert other.job_id not in fired_jobs(parts) and len(fired_jobs(parts)) == window


async def test_a_row_whose_send_raised_an_unexpected_error_is_logged_at_once_and_goes_out_on_a_retry(
    parts: Parts, caplog: pytest.LogCaptureFixture
) -> None:
    # Before, such an error ended the send's task unseen until the engine's stop, and the row kept its hold: its
    # shard's checkpoint stayed at it for as long as the shard was owned, and the row never went out.
    await parts.own(1)
    due = row(1, NOW)
    parts.table.insert_all([due])
    send = parts.bus.send

    async def refuse_once(*args: Any, **kwargs: Any) -> tuple[int, int]:
        parts.bus.send = send  # type: ignore[method-assign]
        raise ValueError("a value the bus cannot take")

    parts.bus.send = refuse_once  # type: ignore[method-assign]
    errors = REGISTRY.get_sample_value("tickwheel_fire_errors_total") or 0
    parts.firing.fire_due()
    await parts.firing.settle()
    assert parts.bus.messages == [] and len(parts.table.wheel) == 1  # back in the wheel, a second later
    assert REGISTRY.get_sample_value("tickwheel_fire_errors_total") == errors + 1
    assert any(r.levelname == "ERROR" and r.exc_info for r in caplog.records)  # now, with its traceback
    assert parts.table.watermarks.mark(1, epoch_ms(NOW) + 999) == due.fire_at_ms  # the checkpoint waits for it
    parts.now = NOW + timedelta(seconds=1)
    parts.firing.fire_due()
    await parts.firing.settle()
    assert fired_jobs(parts) == [due.job_id]
    assert parts.table.watermarks.mark(1, epoch_ms(NOW) + 1000) == epoch_ms(NOW) + 1000


# -- Checkpointer -------------------------------------------------------------------------------------------------
async def test_a_leaving_owner_tags_its_marks_and_keeps_a_shard_a_newer_epoch_fenced(parts: Parts) -> None:
    await parts.own(1, 2, epoch=1)
    parts.ownership.leaving = True
    await parts.store.advance_checkpoints({2: NOW}, 2, "new", NOW)
    assert await parts.checkpointer.checkpoint(force=True) == {1: True, 2: False}
    assert parts.store.checkpoints[1].owner == "m" + LEAVING_TAG
    assert set(parts.table.owned) == {1, 2}  # shard 2 is dropped by the handover once its new owner fires it


async def test_no_checkpoint_is_written_while_firing_is_paused(parts: Parts) -> None:
    await parts.own(1)
    parts.ownership.on_session(SessionState.SUSPENDED)
    assert await parts.checkpointer.checkpoint(force=True) == {}


# -- A shard moved off a live member ------------------------------------------------------------------------------
async def test_a_shard_an_assignment_moves_away_is_fired_until_its_new_owner_has_checkpointed_past_the_move(
    parts: Parts,
) -> None:
    await parts.own(1, 2, epoch=1)
    ownership = parts.ownership
    await ownership.apply(OwnershipChange(2, frozenset(), frozenset({2}), frozenset({1})))
    assert set(parts.table.owned) == {1, 2} and set(ownership.moving) == {2}  # still fired: no gap
    assert set(await parts.checkpointer.checkpoint(force=True)) == {1}  # its new owner checkpoints it, not us
    await parts.store.advance_checkpoints({2: NOW - timedelta(seconds=1)}, 2, "new", NOW)  # before the move
    await ownership._drop_taken(await parts.store.read_checkpoints({2}))
    assert set(parts.table.owned) == {1, 2}
    await parts.store.advance_checkpoints({2: NOW}, 2, "new", NOW)  # past it, under the moving epoch
    await ownership._drop_taken(await parts.store.read_checkpoints({2}))
    assert set(parts.table.owned) == {1} and ownership.moving == {}


async def test_a_run_chained_on_a_shard_being_handed_over_is_announced_to_its_new_owner(parts: Parts) -> None:
    _, kept_run = job(NOW)
    await parts.own(kept_run.shard, kept_run.shard + 1, epoch=1)
    moved = kept_run.shard + 1
    await parts.ownership.apply(OwnershipChange(2, frozenset(), frozenset({moved}), frozenset({kept_run.shard})))
    following = replace(kept_run, shard=moved, run_id=uuid.uuid4(), fire_at=NOW + timedelta(minutes=1))
    parts.firing._take_written(Step(ChainResult.CHAINED, following=following))
    parts.firing._take_written(Step(ChainResult.CHAINED, following=replace(following, shard=kept_run.shard)))
    await asyncio.gather(*parts.tasks)
    near = parts.bus.on(topic_names(parts.settings.kafka.topic_prefix)["near"])
    # The new owner may have read that minute before the chaining wrote the row, and we drop the shard (and the row
    # in our wheel) once it has checkpointed past the move: without the announcement only a rescan found it.
    assert [(r.run_id, r.shard) for r in near] == [(following.run_id, moved)]


async def test_a_moved_shard_given_back_is_kept_and_one_nobody_takes_is_dropped_at_its_deadline(parts: Parts) -> None:
    await parts.own(1, 2, 3, epoch=1)
    ownership = parts.ownership
    await ownership.apply(OwnershipChange(2, frozenset(), frozenset({2, 3}), frozenset({1})))
    await ownership.apply(OwnershipChange(3, frozenset(), frozenset(), frozenset({1, 2, 3})))  # 2 and 3 back
    assert ownership.moving == {}
    await ownership.apply(OwnershipChange(4, frozenset(), frozenset({3}), frozenset({1, 2})))
    parts.mono += parts.settings.dispatcher.handover_timeout_s + 1
    await ownership._drop_taken({})
    assert set(parts.table.owned) == {1, 2} and ownership.moving == {}


async def test_a_lost_session_drops_the_moving_shards_too(parts: Parts) -> None:
    await parts.own(1, 2, epoch=1)
    await parts.ownership.apply(OwnershipChange(2, frozenset(), frozenset({2}), frozenset({1})))
    parts.ownership.on_session(SessionState.LOST)
    assert parts.table.owned == {} and parts.ownership.moving == {}


# -- A dispatcher that joins (one killed and started again) takes shards from a live member -----------------------
STEP = timedelta(seconds=2)


async def joined(*, tagged: bool) -> tuple[Parts, Parts, list[tuple[uuid.UUID, int]]]:
    """Survivor `a` has fired shards 1 and 2 for minutes (its last mark on shard 1 is 50 s old: marks move a
    checkpoint step at a time); newcomer `b` joins and the next assignment moves shard 1 to it. `tagged`: `a` writes
    its handed-over marks when the move reaches it (else, as if that write had failed, only its old mark is there).
    Returns both and the rows of shard 1 (run id, due ms), one every 2 s from 170 s ago to a minute ahead."""
    a = Parts(member="a")
    b = Parts(member="b", store=a.store, bus=a.bus)
    _, run = job(NOW)
    rows = []
    for i in range(-85, 31):
        moved = replace(run, shard=1, run_id=uuid.uuid4())
        await a.store.write_due_row(moved, NOW + i * STEP, 0, RunKind.RUN)
        rows.append((moved.run_id, epoch_ms(NOW + i * STEP)))
    await a.store.advance_checkpoints({1: NOW - timedelta(seconds=50), 2: NOW}, 1, "a", NOW)
    await a.own(1, 2, epoch=1)
    a.firing.fire_due()  # a has sent everything due so far
    await a.firing.settle()
    assignment = ShardAssignment(epoch=2, shards=1024, members={"a": [(2, 3)], "b": [(1, 2)]})
    a.ownership.offer(assignment)
    await a.ownership.apply(plan_ownership(frozenset(a.table.owned), assignment, "a"))
    assert a.ownership.marking is not None
    await a.ownership.marking
    if not tagged:  # as if that write had failed (or not landed yet): a's old mark
        await a.store.advance_checkpoints({1: NOW - timedelta(seconds=50)}, 1, "a", NOW)
    b.ownership.set_member("b")
    b.ownership.confirm_alive()
    b.ownership.offer(assignment)
    await b.ownership.apply(plan_ownership(frozenset(), assignment, "b"))
    b.ownership.confirm_alive()  # its liveness loop confirms it every 0.25 s meanwhile
    b.firing.fire_due()
    await b.firing.settle()
    return a, b, rows


def sent_by(parts: Parts, name: str) -> list[DueRun]:
    lane = topic_names(parts.settings.kafka.topic_prefix)["default"]
    return [
        decode_due_run(m.value)
        for m in parts.bus.messages
        if m.topic == lane and ("dispatcher", name.encode()) in m.headers
    ]


async def test_a_dispatcher_that_joins_does_not_send_again_the_minutes_a_live_member_had_sent() -> None:
    a, b, rows = await joined(tagged=True)
    sent_before = {run_id for run_id, due_ms in rows if due_ms <= epoch_ms(NOW)}
    assert sent_before == {r.run_id for r in sent_by(a, "a")}
    again = [r for r in sent_by(b, "b") if r.run_id in sent_before]
    # Before: b resumed from a's 50 s old mark minus 120 s, and sent again every one of the 86 runs a had sent (at
    # 20 runs/s, thousands in a burst, each a lane message and a worker's refused claim; soak run 11's 8-10 s).
    # Now: a tags its mark as the move reaches it, b resumes from it minus the handover's 5 s.
    assert len(again) <= HANDOVER_GRACE_S / STEP.total_seconds() + 1, f"{len(again)} of {len(sent_before)} sent again"
    assert b.store.checkpoints[1].owner == "a" + LEAVING_TAG
    assert b.table.owned[1].start == NOW - timedelta(seconds=HANDOVER_GRACE_S)
    # And no gap: a fires shard 1 until b has checkpointed past the move, then lets it go.
    for parts in (a, b):
        parts.now += timedelta(seconds=3)
        parts.firing.fire_due()
        await parts.firing.settle()
    due = {run_id for run_id, due_ms in rows if due_ms <= epoch_ms(NOW + timedelta(seconds=3))}
    assert due <= {r.run_id for r in sent_by(a, "a") + sent_by(b, "b")}
    assert 1 in a.table.owned
    await b.checkpointer.checkpoint(force=True)
    await a.ownership._drop_taken(await a.store.read_checkpoints({1}))
    assert 1 not in a.table.owned and b.store.checkpoints[1].owner == "b"


async def test_without_the_tagged_mark_a_joining_dispatcher_resumes_a_live_members_mark_with_seconds_of_grace() -> None:
    _, b, _ = await joined(tagged=False)
    again = [r for r in sent_by(b, "b") if r.fire_at_ms <= epoch_ms(NOW)]
    assert len(again) <= (50 + HANDOVER_GRACE_S) / STEP.total_seconds() + 1, f"{len(again)} sent again"
    assert b.table.owned[1].start == NOW - timedelta(seconds=50 + HANDOVER_GRACE_S)  # not 50 + 120
    assert b.mono >= HANDOVER_MARK_WAIT_S  # it waited for the tagged mark first (a fired meanwhile)


async def test_a_shard_whose_mark_was_written_by_a_member_no_longer_assigned_is_resumed_with_the_full_grace() -> None:
    b = Parts(member="b")
    await b.store.advance_checkpoints({1: NOW - timedelta(seconds=50)}, 1, "a", NOW)  # a: evicted, dead
    b.ownership.offer(ShardAssignment(epoch=2, shards=1024, members={"b": [(1, 2)]}))
    await b.own(1, epoch=2)
    grace = b.settings.dispatcher.resume_grace_s
    assert b.table.owned[1].start == NOW - timedelta(seconds=50 + grace)
    assert b.mono == 0  # nothing to wait for


async def test_a_moved_shard_given_back_before_its_new_owner_took_it_gets_an_untagged_mark_again() -> None:
    a = Parts(member="a")
    await a.own(1, 2, epoch=1)
    await a.checkpointer.checkpoint(force=True)
    await a.ownership.apply(OwnershipChange(2, frozenset(), frozenset({2}), frozenset({1})))
    assert a.ownership.marking is not None
    await a.ownership.marking
    assert a.store.checkpoints[2].owner == "a" + LEAVING_TAG and a.store.checkpoints[2].owner_epoch == 1
    await a.ownership.apply(OwnershipChange(3, frozenset(), frozenset(), frozenset({1, 2})))
    await a.checkpointer.checkpoint()
    assert a.store.checkpoints[2].owner == "a" and a.store.checkpoints[2].owner_epoch == 3


async def test_a_handed_over_mark_that_lands_after_the_new_owners_own_mark_does_not_replace_it() -> None:
    a = Parts(member="a")
    await a.own(1, 2, epoch=1)
    await a.ownership.apply(OwnershipChange(2, frozenset(), frozenset({2}), frozenset({1})))
    await a.store.advance_checkpoints({2: NOW + timedelta(seconds=1)}, 2, "b", NOW)  # b was quicker
    assert a.ownership.marking is not None
    await a.ownership.marking  # written under the epoch `a` owned shard 2 at: refused
    held = a.store.checkpoints[2]
    assert (held.owner, held.owner_epoch, held.fired_through) == ("b", 2, NOW + timedelta(seconds=1))
