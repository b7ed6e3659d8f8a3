"""Schedules end to end: validation messages, instants, once/interval/cron windows, preview and catch-up."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwheel.core.schedule import (
    CatchUpPolicy,
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    ScheduleError,
    catch_up,
    first_fire,
    next_fire,
    parse_instant,
    preview,
    validate,
)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "field", "fragment"),
    [
        (CronSchedule("0 0 * * *", "Mars/Olympus"), "schedule.tz", "unknown time zone 'Mars/Olympus'"),
        (CronSchedule("0 0 * * *", "../etc/passwd"), "schedule.tz", "unknown time zone"),
        (CronSchedule("0 0 31 2 *", "UTC"), "schedule.expr", "never fires"),
        (CronSchedule("0 0 30 2 *", "UTC"), "schedule.expr", "never fires"),
        (CronSchedule("*/30 * * * * *", "UTC"), "schedule.expr", "fires every 30 s, more often than the minimum"),
        (CronSchedule("0 0 * * *", "UTC", max_runs=0), "schedule.max_runs", "at least 1"),
        (CronSchedule("0 0 * * *", "UTC", start_at=T0, end_at=T0), "schedule.end_at", "after start_at"),
        (
            CronSchedule("0 0 1 1 *", "UTC", start_at=T0, end_at=T0 + timedelta(days=30)),
            "schedule.end_at",
            "never fires between",
        ),
        (IntervalSchedule(30, T0), "schedule.every_s", "interval 30 s is below the minimum of 60 s"),
        (IntervalSchedule(3600, datetime(2026, 1, 1)), "schedule.anchor_at", "needs a time zone offset"),
        (OnceSchedule(datetime(2026, 1, 1)), "schedule.run_at", "needs a time zone offset"),
    ],
)
def test_validation_names_the_field_and_says_why(schedule: object, field: str, fragment: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate(schedule)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_higher_minimum_rejects_minutely_cron() -> None:
    with pytest.raises(ScheduleError, match="fires every 60 s, more often than the minimum of 300 s"):
        validate(CronSchedule("* * * * *", "UTC"), min_interval_s=300)


def test_valid_schedules_pass_and_the_minimum_is_configurable() -> None:
    validate(CronSchedule("*/15 * * * *", "Europe/Paris"))
    validate(CronSchedule("*/10 * * * * *", "UTC"), min_interval_s=10)
    validate(IntervalSchedule(15, T0), min_interval_s=10)
    validate(OnceSchedule(T0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-08T02:30:00-05:00", datetime(2026, 3, 8, 7, 30, tzinfo=UTC)),
        ("2026-03-08T07:30:00Z", datetime(2026, 3, 8, 7, 30, tzinfo=UTC)),
        ("2026-03-08T02:30:00[America/New_York]", datetime(2026, 3, 8, 7, 0, tzinfo=UTC)),  # gap: after it
        ("2026-11-01T01:30:00[America/New_York]", datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),  # repeat: first
        ("2026-11-01T01:30:00-05:00[America/New_York]", datetime(2026, 11, 1, 6, 30, tzinfo=UTC)),
        ("2126-01-01T09:00:00[Asia/Kathmandu]", datetime(2126, 1, 1, 3, 15, tzinfo=UTC)),
    ],
)
def test_parse_instant(text: str, expected: datetime) -> None:
    assert parse_instant(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("2026-03-08T02:30:00", "has no offset"),
        ("tomorrow", "not an ISO-8601"),
        ("2026-03-08T02:30:00[Nowhere/Land]", "unknown time zone"),
        ("2026-11-01T01:30:00+01:00[America/New_York]", "offset does not match"),
        ("2026-02-30T00:00:00Z", "not an ISO-8601"),
    ],
)
def test_parse_instant_rejects_bad_input(text: str, fragment: str) -> None:
    with pytest.raises(ScheduleError, match=fragment) as caught:
        parse_instant(text)
    assert caught.value.field == "schedule.run_at"


def test_once_fires_once() -> None:
    once = OnceSchedule(T0)
    assert next_fire(once, T0 - timedelta(seconds=1)) == T0
    assert next_fire(once, T0) is None
    assert next_fire(once, T0 - timedelta(days=1), fired_count=1) is None
    assert first_fire(once, T0 + timedelta(hours=1)) == T0  # past: due at once


def test_interval_fires_by_elapsed_time_from_its_anchor() -> None:
    every = IntervalSchedule(900, T0)
    assert next_fire(every, T0 - timedelta(days=3)) == T0
    assert next_fire(every, T0) == T0 + timedelta(minutes=15)
    assert next_fire(every, T0 + timedelta(minutes=16)) == T0 + timedelta(minutes=30)
    assert first_fire(every, T0 + timedelta(minutes=15)) == T0 + timedelta(minutes=15)


def test_start_end_and_max_runs_bound_recurring_schedules() -> None:
    cron = CronSchedule("0 * * * *", "UTC", start_at=T0 + timedelta(minutes=30), end_at=T0 + timedelta(hours=3))
    assert [f.at_utc.hour for f in preview(cron, T0 - timedelta(days=1), 10)] == [13, 14, 15]
    limited = replace(cron, max_runs=2)
    assert len(preview(limited, T0, 10)) == 2
    assert next_fire(limited, T0, fired_count=2) is None


def test_preview_shows_utc_and_local_time() -> None:
    fires = preview(CronSchedule("0 9 * * MON-FRI", "Asia/Kolkata"), T0, 2)
    assert [f.at_utc.isoformat() for f in fires] == ["2026-06-02T03:30:00+00:00", "2026-06-03T03:30:00+00:00"]
    assert fires[0].local.isoformat() == "2026-06-02T09:00:00+05:30"
    assert fires[0].dst is None


def test_naive_after_is_rejected() -> None:
    with pytest.raises(ScheduleError, match="needs a time zone offset"):
        next_fire(CronSchedule("* * * * *", "UTC"), datetime(2026, 1, 1))


MINUTELY = CronSchedule("* * * * *", "UTC")


def test_catch_up_latest_runs_only_the_newest_missed_fire() -> None:
    got = catch_up(MINUTELY, T0, T0 + timedelta(minutes=30, seconds=5))
    assert got == [T0 + timedelta(minutes=30)]


def test_catch_up_all_runs_the_newest_missed_fires_oldest_first() -> None:
    got = catch_up(MINUTELY, T0, T0 + timedelta(minutes=30), CatchUpPolicy.ALL, max_count=3)
    assert got == [T0 + timedelta(minutes=m) for m in (28, 29, 30)]
    got = catch_up(MINUTELY, T0, T0 + timedelta(minutes=2), CatchUpPolicy.ALL, max_count=10)
    assert got == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]


def test_catch_up_respects_max_age_and_none() -> None:
    daily = CronSchedule("0 0 * * *", "UTC")
    now = datetime(2026, 6, 10, 6, tzinfo=UTC)
    assert catch_up(daily, now - timedelta(days=5), now, CatchUpPolicy.ALL, 10, max_age_s=3 * 86400) == [
        datetime(2026, 6, d, tzinfo=UTC) for d in (8, 9, 10)
    ]
    assert catch_up(daily, None, now, CatchUpPolicy.LATEST, max_age_s=3600) == []
    assert catch_up(daily, None, now, CatchUpPolicy.LATEST, max_age_s=None) == []
    assert catch_up(daily, now - timedelta(days=5), now, CatchUpPolicy.SKIP) == []


def test_catch_up_of_a_once_job_never_fired() -> None:
    once = OnceSchedule(T0)
    assert catch_up(once, None, T0 + timedelta(minutes=5), max_age_s=3600) == [T0]
    assert catch_up(once, None, T0 + timedelta(hours=2), max_age_s=3600) == []


def test_catch_up_after_a_long_outage_is_bounded() -> None:
    every_second = CronSchedule("* * * * * *", "UTC")
    got = catch_up(every_second, T0 - timedelta(days=365), T0, CatchUpPolicy.ALL, 5, max_age_s=None)
    assert got == [T0 - timedelta(seconds=s) for s in (4, 3, 2, 1, 0)]
