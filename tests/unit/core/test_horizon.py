"""Far horizon: which runs wait in runs_far, how long a run's rows live, which days the mover moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwheel.core.horizon import (
    FAR_AFTER,
    MAX_TTL_S,
    MOVE_LEAD,
    RUN_RETENTION_S,
    days_to_move,
    is_far,
    minutes_to_sweep,
    retention_ttl_s,
)

NOW = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def test_runs_beyond_the_far_threshold_wait_in_the_far_table() -> None:
    assert not is_far(NOW + FAR_AFTER, NOW)
    assert is_far(NOW + FAR_AFTER + timedelta(seconds=1), NOW)
    assert not is_far(NOW - DAY, NOW)


def test_retention_counts_from_the_due_time_up_to_cassandras_limit() -> None:
    month_s = 30 * 86400
    assert month_s == RUN_RETENTION_S
    assert retention_ttl_s(NOW - DAY, NOW, month_s) == month_s
    assert retention_ttl_s(NOW + 20 * DAY, NOW, month_s) == 20 * 86400 + month_s
    assert retention_ttl_s(NOW + 400 * DAY, NOW, month_s) == 400 * 86400 + month_s
    assert retention_ttl_s(NOW + 30 * 365 * DAY, NOW, month_s) == MAX_TTL_S


def test_a_tenants_retention_counts_from_the_due_time_too() -> None:
    three_days_s, ninety_days_s = 3 * 86400, 90 * 86400
    assert retention_ttl_s(NOW - DAY, NOW, three_days_s) == three_days_s
    assert retention_ttl_s(NOW + DAY, NOW, three_days_s) == 86400 + three_days_s
    assert retention_ttl_s(NOW + 400 * DAY, NOW, ninety_days_s) == 400 * 86400 + ninety_days_s, "far: outlives due"
    assert retention_ttl_s(NOW + 20 * 365 * DAY, NOW, ninety_days_s) == MAX_TTL_S


def test_a_new_leader_moves_from_the_lookback_through_the_lead() -> None:
    days = days_to_move(NOW, None, timedelta(days=7))
    assert days[0] == datetime(2026, 11, 23, tzinfo=UTC)
    assert days[-1] == datetime(2026, 12, 2, tzinfo=UTC)  # the day of now + MOVE_LEAD
    assert len(days) == 10


def test_a_day_moved_is_not_moved_again() -> None:
    assert days_to_move(NOW, datetime(2026, 12, 2, tzinfo=UTC), timedelta(days=7)) == []
    assert days_to_move(NOW + DAY, datetime(2026, 12, 2, tzinfo=UTC), timedelta(days=7)) == [
        datetime(2026, 12, 3, tzinfo=UTC)
    ]


def test_no_run_lands_in_a_day_the_mover_may_already_have_moved() -> None:
    # A day is moved from the moment it starts before now + MOVE_LEAD; a run is written to the far table only
    # while it is due after now + FAR_AFTER, so every far write to a day precedes its move by days.
    assert FAR_AFTER > MOVE_LEAD + DAY


def test_the_sweeper_reads_each_minute_once_it_is_wholly_past_its_grace() -> None:
    now = datetime(2026, 12, 1, 10, 7, 30, tzinfo=UTC)
    grace, lookback = timedelta(minutes=5), timedelta(minutes=3)
    minute = timedelta(minutes=1)
    first = [datetime(2026, 12, 1, 9, 59, tzinfo=UTC) + i * minute for i in range(3)]
    assert minutes_to_sweep(None, now, grace, lookback, 60) == first  # 10:02 holds now - grace: not yet
    assert minutes_to_sweep(first[-1] + minute, now, grace, lookback, 60) == []
    assert minutes_to_sweep(first[-1] + minute, now + minute, grace, lookback, 60) == [first[-1] + minute]
    behind = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)  # a coordinator back after two hours: 60 a pass
    assert minutes_to_sweep(behind, now, grace, lookback, 60) == [behind + i * minute for i in range(60)]
