"""The dispatcher's and coordinator's pure decisions, without I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import msgspec

from coordinator.assignment import next_assignment, unowned
from coordinator.sweeper import Repair, RunView, diagnose
from dispatcher.firing import RecentlyFired, Watermarks, checkpoints_due, fire_order, needs_chain
from dispatcher.ownership import is_newer, may_fire, plan_ownership, resume_from, shards_of
from dispatcher.preload import accept_near, key_of, loadable_until, plan_inserts
from schemas.messages import DueRun, ShardAssignment
from tickwheel.coordination.zookeeper import SessionState

NOW = datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC)


def due(fire_at_ms: int, *, lane: str = "default", tolerance_ms: int = 0, shard: int = 1, **kw: object) -> DueRun:
    fields: dict[str, object] = {
        "run_id": uuid.uuid4(),
        "job_id": uuid.uuid4(),
        "tenant_id": "t",
        "shard": shard,
        "attempt": 0,
        "kind": "run",
        "lane": lane,
        "job_version": 1,
        "scheduled_at_ms": fire_at_ms,
        "fire_at_ms": fire_at_ms,
        "tolerance_ms": tolerance_ms,
    }
    return DueRun(**{**fields, **kw})  # type: ignore[arg-type]


def assignment(epoch: int, **members: list[tuple[int, int]]) -> ShardAssignment:
    return ShardAssignment(epoch=epoch, shards=8, members=members)


def test_a_member_owns_exactly_the_shards_of_its_ranges() -> None:
    a = assignment(3, m1=[(0, 2), (5, 6)], m2=[(2, 5), (6, 8)])
    assert shards_of(a, "m1") == {0, 1, 5}
    assert shards_of(a, "nobody") == frozenset()
    assert shards_of(None, "m1") == frozenset()


def test_a_new_assignment_adds_and_removes_only_what_changed() -> None:
    change = plan_ownership(frozenset({0, 1, 2}), assignment(4, m1=[(1, 4)]), "m1")
    assert (change.epoch, change.added, change.removed, change.kept) == (
        4,
        frozenset({3}),
        frozenset({0}),
        frozenset({1, 2}),
    )


def test_without_a_member_every_shard_is_released() -> None:
    assert plan_ownership(frozenset({0, 1}), assignment(2, m1=[(0, 2)]), None).removed == {0, 1}


def test_an_older_epoch_seen_late_is_ignored() -> None:
    assert not is_newer(assignment(2), assignment(3))
    assert is_newer(assignment(3), assignment(3)) and is_newer(assignment(1), None)


def test_a_new_owner_resumes_a_grace_period_before_the_watermark_or_now() -> None:
    assert resume_from(NOW - timedelta(seconds=10), NOW, 120) == NOW - timedelta(seconds=130)
    assert resume_from(None, NOW, 120) == NOW - timedelta(seconds=120)


def test_firing_needs_a_connected_session_confirmed_recently() -> None:
    assert may_fire(SessionState.CONNECTED, False, 1.0, 1.5)
    assert not may_fire(SessionState.SUSPENDED, False, 1.0, 1.5)
    assert not may_fire(SessionState.LOST, False, 1.0, 1.5)
    assert not may_fire(SessionState.CONNECTED, True, 1.0, 1.5)
    assert not may_fire(SessionState.CONNECTED, False, 2.0, 1.5)  # a stall past the alive window


def test_the_horizon_covers_whole_minutes_ending_within_now_plus_horizon() -> None:
    assert loadable_until(NOW, 120) == datetime(2026, 11, 29, 12, 2, tzinfo=UTC)
    assert loadable_until(NOW.replace(second=0), 120) == datetime(2026, 11, 29, 12, 2, tzinfo=UTC)


def test_announcements_are_taken_only_for_owned_shards_inside_the_loaded_horizon() -> None:
    run = due(1_000, shard=3)
    assert accept_near(run, {3: None}, 2_000)
    assert not accept_near(run, {4: None}, 2_000)
    assert not accept_near(run, {3: None}, 1_000)
    assert not accept_near(run, {3: None}, None)


def test_the_wheel_key_tells_a_deferred_row_from_the_first_one() -> None:
    first = due(1_000)
    later = DueRun(**{**{f: getattr(first, f) for f in first.__struct_fields__}, "fire_at_ms": 31_000})
    assert key_of(first) != key_of(later)
    assert key_of(first)[:3] == key_of(later)[:3]


def test_runs_keep_their_time_while_their_second_is_under_capacity() -> None:
    runs = [due(5_000, tolerance_ms=10_000) for _ in range(3)]
    planned, load = plan_inserts(runs, {}, capacity_per_s=3)
    assert [ms for ms, _ in planned] == [5_000] * 3
    assert load == {5: 3}


def test_an_overloaded_second_spreads_tolerant_runs_inside_their_tolerance_and_never_urgent_ones() -> None:
    tolerant = [due(5_000, tolerance_ms=4_000, lane="bulk") for _ in range(50)]
    urgent = [due(5_000, lane="urgent") for _ in range(10)]
    planned, _ = plan_inserts(tolerant + urgent, {5: 100}, capacity_per_s=20)
    moved = {run.run_id: ms for ms, run in planned}
    assert all(moved[r.run_id] == 5_000 for r in urgent)
    assert all(5_000 <= moved[r.run_id] <= 9_000 for r in tolerant)
    assert len({moved[r.run_id] for r in tolerant}) > 10
    again, _ = plan_inserts(tolerant + urgent, {5: 100}, capacity_per_s=20)
    assert {run.run_id: ms for ms, run in again} == moved  # deterministic


def test_a_due_batch_fires_urgent_first_then_default_then_bulk() -> None:
    batch = [(2, key_of(r), r) for r in (due(2, lane="bulk"), due(2, lane="default"))]
    batch += [(1, key_of(r), r) for r in (due(1, lane="bulk"), due(2, lane="urgent"))]
    assert [(e[2].lane, e[0]) for e in fire_order(batch)] == [("urgent", 1), ("default", 2), ("bulk", 1), ("bulk", 2)]


def test_only_the_first_attempt_of_a_run_row_chains() -> None:
    assert needs_chain(due(1))
    assert not needs_chain(due(1, attempt=1))
    assert not needs_chain(due(1, kind="lease_check"))
    assert not needs_chain(msgspec.structs.replace(due(1), recurring=False))  # a once job: no job read
    assert needs_chain(msgspec.structs.replace(due(1), recurring=True))


def test_a_watermark_never_passes_an_unacknowledged_row() -> None:
    marks = Watermarks()
    first, second = due(1_000), due(2_000)
    marks.hold(1, key_of(first), 1_000)
    marks.hold(1, key_of(second), 2_000)
    marks.hold(1, key_of(first), 5_000)  # a retried send keeps its first due time
    assert marks.mark(1, 9_000) == 1_000
    marks.release(1, key_of(first))
    assert marks.mark(1, 9_000) == 2_000
    marks.release(1, key_of(second))
    assert marks.mark(1, 9_000) == 9_000
    assert marks.mark(2, 9_000) == 9_000


def test_checkpoints_are_written_only_when_they_moved_a_step() -> None:
    assert checkpoints_due({1: 10_000, 2: 10_000, 3: 10_000}, {1: 9_500, 2: 5_000}, 1_000) == {2: 10_000, 3: 10_000}


def test_recently_fired_keys_are_remembered_for_a_few_minutes() -> None:
    recent = RecentlyFired(keep_minutes=2)
    run = due(60_000 * 10 + 5)
    recent.add(key_of(run))
    assert key_of(run) in recent
    recent.prune(60_000 * 12)
    assert key_of(run) in recent
    recent.prune(60_000 * 13)
    assert key_of(run) not in recent


def test_the_first_assignment_splits_all_shards_and_starts_epoch_one() -> None:
    first = next_assignment(None, ["m2", "m1"], 8)
    assert first is not None
    assert first.epoch == 1 and first.members == {"m1": [(0, 4)], "m2": [(4, 8)]}
    assert unowned(first, 8) == 0 and unowned(None, 8) == 8


def test_an_unchanged_membership_publishes_nothing_and_a_change_moves_few_shards() -> None:
    first = next_assignment(None, ["m1", "m2"], 8)
    assert next_assignment(first, ["m2", "m1"], 8) is None
    third = next_assignment(first, ["m1", "m2", "m3"], 8)
    assert third is not None and third.epoch == 2
    assert first is not None
    m1_before = {s for a, b in first.members["m1"] for s in range(a, b)}
    m1_after = {s for a, b in third.members["m1"] for s in range(a, b)}
    assert m1_after <= m1_before and len(m1_before - m1_after) <= 2
    gone = next_assignment(third, ["m1", "m3"], 8)
    assert gone is not None and gone.epoch == 3 and "m2" not in gone.members and unowned(gone, 8) == 0


GRACE = timedelta(seconds=300)


def test_the_sweeper_recreates_a_missing_next_run_of_a_recurring_job() -> None:
    assert diagnose(True, "ACTIVE", NOW + timedelta(minutes=5), None, NOW, GRACE) is Repair.RECREATE
    assert diagnose(True, "ACTIVE", NOW - timedelta(hours=1), None, NOW, GRACE) is Repair.CHAIN_FROM_NOW
    assert diagnose(False, "ACTIVE", NOW, None, NOW, GRACE) is None


def test_the_sweeper_refires_a_run_still_scheduled_well_past_its_time() -> None:
    overdue = RunView("SCHEDULED", 0, NOW - timedelta(minutes=10))
    assert diagnose(True, "ACTIVE", NOW - timedelta(minutes=10), overdue, NOW, GRACE) is Repair.REFIRE
    recent = RunView("SCHEDULED", 0, NOW - timedelta(minutes=1))
    assert diagnose(True, "ACTIVE", NOW - timedelta(minutes=1), recent, NOW, GRACE) is None
    running = RunView("RUNNING", 1, NOW - timedelta(minutes=10))
    assert diagnose(True, "ACTIVE", NOW - timedelta(minutes=10), running, NOW, GRACE) is None


def test_the_sweeper_leaves_paused_and_deleted_jobs_alone() -> None:
    assert diagnose(True, "PAUSED", NOW, None, NOW, GRACE) is None
    assert diagnose(True, "DELETED", NOW, None, NOW, GRACE) is None


def test_a_first_assignment_outranks_every_epoch_the_checkpoints_hold() -> None:
    # ZooKeeper's state lost: no published assignment, but checkpoints fenced at epoch 41 must not fence us out.
    first = next_assignment(None, ["m1"], 8, floor_epoch=41)
    assert first is not None and first.epoch == 42
    assert next_assignment(first, ["m1", "m2"], 8, floor_epoch=0).epoch == 43  # type: ignore[union-attr]


def test_the_sweeper_finds_runs_left_running_past_their_lease_or_retrying_past_their_time() -> None:
    from coordinator.sweeper import HeldRun, diagnose_stranded

    old = NOW - timedelta(minutes=10)
    assert diagnose_stranded(HeldRun("RUNNING", 1, None, old), NOW, GRACE) is Repair.LEASE_LAPSED
    assert diagnose_stranded(HeldRun("RUNNING", 1, None, NOW + timedelta(minutes=1)), NOW, GRACE) is None
    assert diagnose_stranded(HeldRun("RUNNING", 1, None, NOW - timedelta(seconds=1)), NOW, GRACE) is None  # in grace
    assert diagnose_stranded(HeldRun("RETRY", 1, old, None), NOW, GRACE) is Repair.RETRY_UNFIRED
    assert diagnose_stranded(HeldRun("RETRY", 1, NOW, None), NOW, GRACE) is None
    assert diagnose_stranded(HeldRun("SCHEDULED", 0, old, None), NOW, GRACE) is None  # the overdue repair's case
