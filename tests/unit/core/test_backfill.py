"""Backfill plans: the past occurrences with the schedule's own rules, spread over the tolerance, bounded."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from tickwheel.core.backfill import MAX_COUNTED, occurrences_between, plan_backfill
from tickwheel.core.calendars import DateRange, Exclusions
from tickwheel.core.ids import epoch_ms
from tickwheel.core.schedule import CronSchedule, DstRepeatPolicy, IntervalSchedule

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)


def test_the_occurrences_of_a_past_range_follow_the_dst_policy_and_the_exclusions():
    schedule = CronSchedule(
        "30 1 * * *", "America/New_York", dst_repeat=DstRepeatPolicy.BOTH,
        exclusions=Exclusions(tz="America/New_York", dates=(DateRange(date(2026, 10, 30), date(2026, 10, 30)),),
                              skipped_ms=frozenset({epoch_ms(datetime(2026, 11, 3, 6, 30, tzinfo=UTC))})),
        paused_until=NOW + timedelta(days=3),  # a pause is about the present, not the past
    )  # fmt: skip
    found = occurrences_between(
        schedule, datetime(2026, 10, 29, tzinfo=UTC), datetime(2026, 11, 4, tzinfo=UTC), 100
    )
    assert found == [
        datetime(2026, 10, 29, 5, 30, tzinfo=UTC),
        datetime(2026, 10, 31, 5, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),  # 01:30 EDT
        datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST, the repeated hour (policy both)
        datetime(2026, 11, 2, 6, 30, tzinfo=UTC),
    ]


def test_runs_are_spread_evenly_over_the_tolerance_from_now():
    schedule = IntervalSchedule(3600, anchor_at=datetime(2026, 1, 1, tzinfo=UTC))
    plan = plan_backfill(schedule, NOW - timedelta(hours=4), NOW, NOW, tolerance_s=400, limit=1000)
    assert [r.scheduled_at for r in plan.runs] == [NOW - timedelta(hours=h) for h in (4, 3, 2, 1)]
    assert [r.fire_at for r in plan.runs] == [NOW + timedelta(seconds=s) for s in (0, 100, 200, 300)]
    assert not plan.over_limit and plan.counted == 4
    urgent = plan_backfill(schedule, NOW - timedelta(hours=4), NOW, NOW, tolerance_s=0, limit=1000)
    assert {r.fire_at for r in urgent.runs} == {NOW}


def test_a_range_over_the_limit_plans_nothing_and_says_how_many_it_holds():
    schedule = IntervalSchedule(60, anchor_at=datetime(2026, 1, 1, tzinfo=UTC))
    plan = plan_backfill(schedule, NOW - timedelta(hours=20), NOW, NOW, tolerance_s=0, limit=1000)
    assert plan.over_limit and plan.runs == () and plan.counted == 1200
    huge = plan_backfill(schedule, NOW - timedelta(days=300), NOW, NOW, tolerance_s=0, limit=1000)
    assert huge.counted == MAX_COUNTED + 1
