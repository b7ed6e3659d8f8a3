"""DST policy, by example: gaps, repeats, elapsed-time jobs, odd offsets, midnight changes, far futures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwheel.core.schedule import CronSchedule, DstGapPolicy, DstRepeatPolicy, next_fire, preview


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc,arg-type]


def fires(schedule: CronSchedule, after: datetime, count: int) -> list[tuple[str, str | None]]:
    return [(f.local.isoformat(), f.dst) for f in preview(schedule, after, count)]


NY = "America/New_York"


def test_spring_forward_gap_runs_at_the_first_instant_after_the_gap_by_default() -> None:
    schedule = CronSchedule("30 2 * * *", NY)
    assert fires(schedule, utc(2026, 3, 7), 3) == [
        ("2026-03-07T02:30:00-05:00", None),
        ("2026-03-08T03:00:00-04:00", "shifted"),
        ("2026-03-09T02:30:00-04:00", None),
    ]


def test_spring_forward_gap_skipped_under_skip_policy() -> None:
    schedule = CronSchedule("30 2 * * *", NY, dst_gap=DstGapPolicy.SKIP)
    assert fires(schedule, utc(2026, 3, 7, 8), 2) == [
        ("2026-03-09T02:30:00-04:00", "after_skipped_gap"),
        ("2026-03-10T02:30:00-04:00", None),
    ]


def test_several_gap_times_collapse_into_one_run_after_the_gap() -> None:
    schedule = CronSchedule("0,20,40 2,3 * * *", NY)
    assert fires(schedule, utc(2026, 3, 8, 6), 4) == [
        ("2026-03-08T03:00:00-04:00", "shifted"),
        ("2026-03-08T03:20:00-04:00", None),
        ("2026-03-08T03:40:00-04:00", None),
        ("2026-03-09T02:00:00-04:00", None),
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            DstRepeatPolicy.FIRST,
            [("2026-11-01T01:30:00-04:00", "skipped_sibling"), ("2026-11-02T01:30:00-05:00", None)],
        ),
        (
            DstRepeatPolicy.SECOND,
            [("2026-11-01T01:30:00-05:00", "skipped_sibling"), ("2026-11-02T01:30:00-05:00", None)],
        ),
        (
            DstRepeatPolicy.BOTH,
            [("2026-11-01T01:30:00-04:00", "repeated"), ("2026-11-01T01:30:00-05:00", "repeated")],
        ),
    ],
)
def test_fall_back_repeat_policies(policy: DstRepeatPolicy, expected: list[tuple[str, str | None]]) -> None:
    schedule = CronSchedule("30 1 * * *", NY, dst_repeat=policy)
    assert fires(schedule, utc(2026, 10, 31, 12), 2) == expected


def test_fall_back_first_never_fires_twice_even_when_asked_from_inside_the_repeat() -> None:
    schedule = CronSchedule("*/10 1 * * *", NY)
    inside_second_pass = utc(2026, 11, 1, 6, 5)  # 01:05 EST, the second 01:05
    assert next_fire(schedule, inside_second_pass) == utc(2026, 11, 2, 6, 0)


def test_fall_back_second_from_inside_the_first_pass_goes_back_to_the_earliest_second_pass_time() -> None:
    schedule = CronSchedule("*/10 1 * * *", NY, dst_repeat=DstRepeatPolicy.SECOND)
    inside_first_pass = utc(2026, 11, 1, 5, 25)  # 01:25 EDT
    assert next_fire(schedule, inside_first_pass) == utc(2026, 11, 1, 6, 0)  # 01:00 EST


def elapsed_steps(expr: str, tz: str, after: datetime, hours: int) -> set[timedelta]:
    schedule = CronSchedule(expr, tz)
    at, steps = next_fire(schedule, after), set()
    assert at is not None
    while at < after + timedelta(hours=hours):
        following = next_fire(schedule, at)
        assert following is not None
        steps.add(following - at)
        at = following
    return steps


@pytest.mark.parametrize(
    ("tz", "change"),
    [
        (NY, utc(2026, 3, 8, 7)),
        (NY, utc(2026, 11, 1, 6)),
        ("Europe/London", utc(2026, 3, 29, 1)),
        ("Europe/London", utc(2026, 10, 25, 1)),
        ("Australia/Sydney", utc(2026, 4, 4, 16)),
        ("Australia/Sydney", utc(2026, 10, 3, 16)),
        ("America/Sao_Paulo", utc(2018, 11, 4, 3)),
        ("America/Havana", utc(2026, 3, 8, 5)),
        ("Asia/Beirut", utc(2026, 3, 28, 22)),
        ("Australia/Lord_Howe", utc(2026, 4, 4, 15)),
        ("Pacific/Chatham", utc(2026, 9, 26, 14)),
        ("America/New_York", utc(2199, 3, 10, 7)),
    ],
)
def test_quarter_hourly_jobs_fire_every_15_minutes_of_elapsed_time_through_changes(tz: str, change: datetime) -> None:
    assert elapsed_steps("*/15 * * * *", tz, change - timedelta(hours=4), 8) == {timedelta(minutes=15)}


@pytest.mark.parametrize("change", [utc(2026, 3, 8, 7), utc(2026, 11, 1, 6)])
def test_hourly_jobs_fire_every_hour_of_elapsed_time_through_whole_hour_changes(change: datetime) -> None:
    assert elapsed_steps("0 * * * *", NY, change - timedelta(hours=5), 10) == {timedelta(hours=1)}


def test_hourly_job_through_a_half_hour_change_keeps_its_wall_clock_minute() -> None:
    # Lord Howe goes from +10:30 to +11 at 02:00 local: 02:00 never shows, the job keeps firing at :00.
    schedule = CronSchedule("0 * * * *", "Australia/Lord_Howe")
    got = fires(schedule, utc(2026, 10, 3, 13, 30), 4)
    assert got == [
        ("2026-10-04T01:00:00+10:30", None),
        ("2026-10-04T03:00:00+11:00", None),
        ("2026-10-04T04:00:00+11:00", None),
        ("2026-10-04T05:00:00+11:00", None),
    ]


@pytest.mark.parametrize(
    ("tz", "after", "expected"),
    [
        # DST starting at midnight: local midnight does not exist that day.
        ("America/Sao_Paulo", utc(2018, 11, 3, 12), ("2018-11-04T01:00:00-02:00", "shifted")),
        ("America/Havana", utc(2026, 3, 7, 12), ("2026-03-08T01:00:00-04:00", "shifted")),
        ("Asia/Beirut", utc(2026, 3, 28, 12), ("2026-03-29T01:00:00+03:00", "shifted")),
        # DST ending at midnight: the hour before it happens twice, FIRST keeps the first.
        ("America/Havana", utc(2026, 10, 31, 12), ("2026-11-01T00:00:00-04:00", "skipped_sibling")),
    ],
)
def test_zones_changing_at_midnight(tz: str, after: datetime, expected: tuple[str, str | None]) -> None:
    assert fires(CronSchedule("0 0 * * *", tz), after, 1) == [expected]


@pytest.mark.parametrize(
    ("tz", "after", "expected"),
    [
        ("America/Sao_Paulo", utc(2018, 2, 17, 12), "2018-02-17T23:00:00-02:00"),
        ("Asia/Beirut", utc(2026, 10, 24, 12), "2026-10-24T23:00:00+03:00"),
    ],
)
def test_midnight_fall_back_repeats_the_hour_before_midnight(tz: str, after: datetime, expected: str) -> None:
    assert fires(CronSchedule("0 23 * * *", tz), after, 1) == [(expected, "skipped_sibling")]


def test_sao_paulo_midnight_repeat_fires_once_on_the_first_pass() -> None:
    schedule = CronSchedule("0 0 * * *", "America/Sao_Paulo")
    assert fires(schedule, utc(2018, 2, 17, 12), 2) == [
        ("2018-02-18T00:00:00-03:00", None),  # clocks went back at 00:00 -02 to 23:00 -03 on the 17th
        ("2018-02-19T00:00:00-03:00", None),
    ]


@pytest.mark.parametrize(
    ("tz", "expected"),
    [
        ("Asia/Kathmandu", "T09:00:00+05:45"),
        ("Asia/Kolkata", "T09:00:00+05:30"),
        ("Australia/Eucla", "T09:00:00+08:45"),
        ("America/St_Johns", "T09:00:00-03:30"),
        ("Pacific/Kiritimati", "T09:00:00+14:00"),
        ("Australia/Adelaide", "T09:00:00+10:30"),
        ("America/Santiago", "T09:00:00-03:00"),
    ],
)
def test_fractional_and_southern_offsets(tz: str, expected: str) -> None:
    assert fires(CronSchedule("0 9 * * *", tz), utc(2026, 1, 1), 1)[0][0][10:] == expected


def test_lord_howe_half_hour_gap_and_repeat() -> None:
    spring = CronSchedule("15 2 * * *", "Australia/Lord_Howe")
    assert fires(spring, utc(2026, 10, 3, 12), 1) == [("2026-10-04T02:30:00+11:00", "shifted")]
    autumn = CronSchedule("45 1 * * *", "Australia/Lord_Howe", dst_repeat=DstRepeatPolicy.BOTH)
    assert fires(autumn, utc(2026, 4, 4, 12), 2) == [
        ("2026-04-05T01:45:00+11:00", "repeated"),
        ("2026-04-05T01:45:00+10:30", "repeated"),
    ]


def test_years_past_2100_use_the_zone_rules() -> None:
    schedule = CronSchedule("30 2 * * *", NY)
    assert fires(schedule, utc(2150, 3, 7), 2) == [
        ("2150-03-07T02:30:00-05:00", None),
        ("2150-03-08T03:00:00-04:00", "shifted"),
    ]
    assert next_fire(CronSchedule("0 0 29 2 *", "Europe/Paris"), utc(2097, 1, 1)) == utc(2104, 2, 28, 23)


def test_leap_day_jobs_fire_only_on_leap_days() -> None:
    got = [f.local.date().isoformat() for f in preview(CronSchedule("0 12 29 2 *", "Asia/Tokyo"), utc(2023, 1, 1), 3)]
    assert got == ["2024-02-29", "2028-02-29", "2032-02-29"]


def test_two_passes_through_a_repeated_hour_get_their_own_next_fire() -> None:
    # The two readings compare equal in their own zone (and hash alike): the kept answers are keyed by the instant.
    schedule = CronSchedule("30 1 * * *", NY)  # the first pass only (DstRepeatPolicy.FIRST)
    first_pass = datetime(2026, 11, 1, 1, 15, tzinfo=ZoneInfo(NY), fold=0)
    second_pass = first_pass.replace(fold=1)
    assert first_pass == second_pass
    assert next_fire(schedule, first_pass) == utc(2026, 11, 1, 5, 30)
    assert next_fire(schedule, second_pass) == utc(2026, 11, 2, 6, 30)
    assert next_fire(schedule, first_pass) == utc(2026, 11, 1, 5, 30)
