"""Catch-up and overlap decisions for an occurrence that comes to fire (tickwheel.core.missed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwheel.core.missed import CatchUp, Overlap, Plan, overlap_verdict, plan_occurrence
from tickwheel.core.policies import CatchUpPolicy, OverlapPolicy
from tickwheel.core.specs import CronSchedule

MINUTELY = CronSchedule(expr="* * * * *", tz="UTC")
M0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def minute(n: int) -> datetime:
    return M0 + timedelta(minutes=n)


def walk(rule: CatchUp, pending: datetime, now: datetime) -> list[datetime]:
    """Fire the pending occurrence at `now` and follow the chain the way the dispatcher does (each chained
    occurrence due by now fires at once); returns the occurrences sent."""
    sent: list[datetime] = []
    at: datetime | None = pending
    fired = 0
    while at is not None and at <= now:
        plan = plan_occurrence(MINUTELY, at, now, rule, fired_count=fired)
        if plan.fire:
            sent.append(at)
            fired += 1
        at = plan.next_at
    return sent


NOW = minute(10) + timedelta(seconds=30)  # down from 12:01 to 12:10:30: ten occurrences missed


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (CatchUp(CatchUpPolicy.ALL, max_count=3), [minute(8), minute(9), minute(10)]),
        (CatchUp(CatchUpPolicy.ALL, max_count=1000), [minute(n) for n in range(1, 11)]),
        (CatchUp(CatchUpPolicy.ALL, max_count=5, max_age_s=200), [minute(8), minute(9), minute(10)]),
        (CatchUp(CatchUpPolicy.LATEST), [minute(10)]),
        (CatchUp(CatchUpPolicy.LATEST, max_age_s=10), [minute(10)]),  # 30 s late: on time, not missed
        (CatchUp(CatchUpPolicy.SKIP), [minute(10)]),  # ditto
        (CatchUp(CatchUpPolicy.ALL, max_count=0), [minute(10)]),
    ],
)
def test_a_dispatcher_back_after_ten_minutes_runs_what_the_policy_says(rule: CatchUp, expected: list[datetime]) -> None:
    assert walk(rule, minute(1), NOW) == expected


def test_a_day_down_with_all_and_max_runs_5_fires_5_not_1440() -> None:
    now = M0 + timedelta(days=1, seconds=90)
    sent = walk(CatchUp(CatchUpPolicy.ALL, max_count=5, max_age_s=None), minute(1), now)
    assert len(sent) == 5
    assert sent[-1] == minute(24 * 60 + 1)


def test_skip_moves_to_the_first_occurrence_not_yet_missed() -> None:
    now = minute(10) + timedelta(seconds=90)  # 12:11:30: 12:11 is on time, 12:10 is missed
    assert plan_occurrence(MINUTELY, minute(1), now, CatchUp(CatchUpPolicy.SKIP), fired_count=0) == Plan(
        False, minute(11)
    )


def test_an_occurrence_on_time_fires_and_chains_its_successor() -> None:
    plan = plan_occurrence(
        MINUTELY, minute(1), minute(1) + timedelta(seconds=59), CatchUp(CatchUpPolicy.SKIP), fired_count=0
    )
    assert plan == Plan(True, minute(2))


def test_max_runs_still_ends_the_schedule_during_a_catch_up() -> None:
    limited = CronSchedule(expr="* * * * *", tz="UTC", max_runs=2)
    sent = []
    at: datetime | None = minute(1)
    fired = 0
    while at is not None and at <= NOW:
        plan = plan_occurrence(limited, at, NOW, CatchUp(CatchUpPolicy.ALL, max_count=5), fired_count=fired)
        sent += [at] if plan.fire else []
        fired += int(plan.fire)
        at = plan.next_at
    assert sent == [minute(6), minute(7)]


@pytest.mark.parametrize(
    ("policy", "in_flight", "verdict"),
    [
        (OverlapPolicy.ALLOW, 3, Overlap.START),
        (OverlapPolicy.SKIP, 0, Overlap.START),
        (OverlapPolicy.SKIP, 1, Overlap.SKIP),
        (OverlapPolicy.BUFFER_ONE, 0, Overlap.START),
        (OverlapPolicy.BUFFER_ONE, 1, Overlap.BUFFER),
        (OverlapPolicy.BUFFER_ONE, 2, Overlap.SKIP),  # one is already waiting
    ],
)
def test_overlap_starts_skips_or_buffers_one(policy: OverlapPolicy, in_flight: int, verdict: Overlap) -> None:
    assert overlap_verdict(policy, in_flight) is verdict


def test_the_stored_spelling_none_reads_as_skip() -> None:
    assert CatchUpPolicy("none") is CatchUpPolicy.SKIP
