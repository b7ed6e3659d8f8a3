"""Cron grammar: fields, names, macros, seconds, L / W / #, Vixie's day OR, and precise errors."""

from __future__ import annotations

from datetime import datetime

import pytest

from tickwheel.core.cron import parse_cron
from tickwheel.core.errors import ScheduleError


def nexts(expr: str, start: datetime, count: int) -> list[datetime]:
    parsed = parse_cron(expr)
    found: list[datetime] = []
    at: datetime | None = start
    for _ in range(count):
        assert at is not None
        at = parsed.next_match(at)
        assert at is not None
        found.append(at)
        at = at.replace(microsecond=1)
    return found


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        ("0 0 L * *", datetime(2024, 2, 1), [datetime(2024, 2, 29), datetime(2024, 3, 31)]),
        ("0 0 L 2 *", datetime(2100, 1, 1), [datetime(2100, 2, 28), datetime(2101, 2, 28)]),
        ("0 0 L-2 * *", datetime(2023, 2, 1), [datetime(2023, 2, 26), datetime(2023, 3, 29)]),
        ("0 0 15W * *", datetime(2025, 3, 1), [datetime(2025, 3, 14), datetime(2025, 4, 15)]),  # Sat 15 -> Fri 14
        ("0 0 1W * *", datetime(2025, 2, 1), [datetime(2025, 2, 3), datetime(2025, 3, 3)]),  # Sat 1 -> Mon 3
        ("0 0 31W * *", datetime(2025, 8, 1), [datetime(2025, 8, 29), datetime(2025, 10, 31)]),  # Sun 31 -> Fri 29
        ("0 0 LW * *", datetime(2025, 5, 1), [datetime(2025, 5, 30), datetime(2025, 6, 30)]),
        ("0 0 * * 5L", datetime(2025, 1, 1), [datetime(2025, 1, 31), datetime(2025, 2, 28)]),
        ("0 0 * * 1#2", datetime(2025, 1, 1), [datetime(2025, 1, 13), datetime(2025, 2, 10)]),
        ("0 0 * * MON#5", datetime(2025, 1, 1), [datetime(2025, 3, 31), datetime(2025, 6, 30)]),
        ("0 0 * 2 1#5", datetime(2025, 1, 1), [datetime(2044, 2, 29), datetime(2072, 2, 29)]),
        ("0 0 29 2 *", datetime(2096, 3, 1), [datetime(2104, 2, 29), datetime(2108, 2, 29)]),
        ("0 0 29 2 *", datetime(2023, 1, 1), [datetime(2024, 2, 29), datetime(2028, 2, 29)]),
        ("0 12 1 JAN-MAR MON-FRI", datetime(2025, 1, 1), [datetime(2025, 1, 1, 12), datetime(2025, 1, 2, 12)]),
        ("30 9 13 * 5", datetime(2025, 6, 1), [datetime(2025, 6, 6, 9, 30), datetime(2025, 6, 13, 9, 30)]),
        ("0 0 */2 * 1", datetime(2025, 9, 1), [datetime(2025, 9, 1), datetime(2025, 9, 15)]),  # `*`-led: AND
        ("0 0 1 * 0", datetime(2025, 6, 2), [datetime(2025, 6, 8), datetime(2025, 6, 15)]),
        ("0 0 * * 7", datetime(2025, 6, 2), [datetime(2025, 6, 8), datetime(2025, 6, 15)]),
        ("15,45 */6 * * *", datetime(2025, 1, 1), [datetime(2025, 1, 1, 0, 15), datetime(2025, 1, 1, 0, 45)]),
        ("*/20 * * * * *", datetime(2025, 1, 1), [datetime(2025, 1, 1), datetime(2025, 1, 1, 0, 0, 20)]),
        ("5-10/5 0 0 1 1 *", datetime(2025, 1, 1), [datetime(2025, 1, 1, 0, 0, 5), datetime(2025, 1, 1, 0, 0, 10)]),
        ("@yearly", datetime(2299, 6, 1), [datetime(2300, 1, 1), datetime(2301, 1, 1)]),
        ("@monthly", datetime(2025, 1, 15), [datetime(2025, 2, 1), datetime(2025, 3, 1)]),
        ("@weekly", datetime(2025, 1, 1), [datetime(2025, 1, 5), datetime(2025, 1, 12)]),
        ("@daily", datetime(2025, 1, 1, 1), [datetime(2025, 1, 2), datetime(2025, 1, 3)]),
        ("@hourly", datetime(2025, 1, 1, 0, 1), [datetime(2025, 1, 1, 1), datetime(2025, 1, 1, 2)]),
        ("7/20 * * * *", datetime(2025, 1, 1), [datetime(2025, 1, 1, 0, 7), datetime(2025, 1, 1, 0, 27)]),
    ],
)
def test_next_matches_follow_the_grammar(expr: str, start: datetime, expected: list[datetime]) -> None:
    assert nexts(expr, start, len(expected)) == expected


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    days = [d.day for d in nexts("0 0 1,15 * MON", datetime(2025, 9, 1), 6)]
    assert days == [1, 8, 15, 22, 29, 1]


def test_macros_and_fields_are_case_and_space_insensitive() -> None:
    assert parse_cron("  @DAILY ").hours == (0,)
    assert parse_cron("0  0   1 jan sun").months == frozenset({1})


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("0 0 31 2 *", "never fires: day 31 does not exist in Feb"),
        ("0 0 30 2 *", "never fires: day 30 does not exist in Feb"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("61 * * * *", "minute field: value 61 is out of range 0-59"),
        ("* 24 * * *", "hour field: value 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month field: value 0 is out of range 1-31"),
        ("* * * 13 *", "month field: value 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week field: value 8 is out of range 0-7"),
        ("*/0 * * * *", "minute field: step 0 is out of range"),
        ("10-5 * * * *", "range start 10 is after its end 5"),
        ("* * * FOO *", "month field: 'FOO' is not a valid value"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "expected 5 fields"),
        ("@reboot", "unknown macro"),
        ("* * * * 1#6", "nth 6 is out of range 1-5"),
        ("", "expected 5 fields"),
    ],
)
def test_bad_expressions_name_the_field_and_say_why(expr: str, fragment: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_cron(expr)
    assert caught.value.field == "schedule.expr"
    assert fragment in caught.value.message


def test_a_never_matching_search_is_bounded() -> None:
    parsed = parse_cron("0 0 * 2 1#5")
    assert parsed.next_match(datetime(9990, 1, 1)) is None


@pytest.mark.parametrize(
    ("expr", "start", "expected_days"),
    [
        ("0 0 */2 * *", datetime(2025, 1, 1), [1, 3, 5, 7, 9, 11]),  # Vixie: both `*`-led -> AND -> odd days
        ("0 0 */2 * *", datetime(2025, 1, 30), [31, 1, 3]),  # Jan 31, then Feb 1 (the step restarts each month)
        ("0 0 2-31/2 * *", datetime(2025, 1, 1), [2, 4, 6]),
        ("0 0 */10 * *", datetime(2025, 4, 1), [1, 11, 21, 1]),  # Apr 31 does not exist: May 1 next
        ("0 0 * * */3", datetime(2025, 6, 1), [1, 4, 7, 8, 11, 14]),  # Sun, Wed, Sat (1 June 2025 is a Sunday)
        ("0 0 */2 * */3", datetime(2025, 6, 1), [1, 7, 11, 15, 21]),  # both `*`-led: odd AND Sun/Wed/Sat
        ("0 0 ? * */2", datetime(2025, 6, 1), [1, 3, 5, 7, 8, 10]),  # `?` is `*`: Sun, Tue, Thu, Sat
        ("0 0 1/2 * 1", datetime(2025, 9, 1), [1, 3, 5, 7, 8, 9]),  # dom not `*`-led: Vixie's OR with Mondays
    ],
)
def test_stepped_day_fields_keep_their_step(expr: str, start: datetime, expected_days: list[int]) -> None:
    assert [d.day for d in nexts(expr, start, len(expected_days))] == expected_days


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("² * * * *", "minute field: '²' has a non-ASCII character"),
        ("0 \uff11\uff12 * * *", "hour field: '\uff11\uff12' has a non-ASCII character"),  # full-width digits
        ("0 0 \u0661 * *", "day-of-month field: '\u0661' has a non-ASCII character"),  # Arabic-Indic one
        ("0 0 * * \u017fun", "day-of-week field"),  # long s upper-cased == 'S' would otherwise read as SUN
        ("0 0 0 * * \U0001d7d3", "day-of-week field"),  # six fields: the last is day-of-week
        ("0\u30000 * * *", "expression has a non-ASCII character"),  # ideographic space
        ("@dailý", "expression has a non-ASCII character"),
    ],
)
def test_only_ascii_digits_and_names_are_accepted(expr: str, fragment: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_cron(expr)
    assert caught.value.field == "schedule.expr"
    assert fragment in caught.value.message


def test_a_huge_expression_is_refused_without_being_echoed() -> None:
    huge = "1," * 500_000 + "1 * * * *"
    with pytest.raises(ScheduleError) as caught:
        parse_cron(huge)
    assert caught.value.field == "schedule.expr"
    assert "at most 256" in caught.value.message
    assert len(str(caught.value)) < 200


def test_an_expression_of_the_maximum_length_still_parses() -> None:
    minutes = ",".join(["0"] * 124)  # 247 characters
    expr = f"{minutes} 0 * * *"
    assert len(expr) <= 256
    assert parse_cron(expr).minutes == (0,)
