"""Several calendars per job with exclusions, against a brute-force reference (DST changes included).

The reference walks every minute of the window, maps matching local readings to instants by the DST policy's
definition (test_dst_oracle.instants_of), unites the expressions in the order listed (a tie is named after the
first) and removes exclusions with its own predicate; it shares only the field predicate `CronExpr.matches`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.unit.core.test_dst_oracle import instants_of, reading
from tickwheel.core.calendars import Calendar, DateRange, Exclusions
from tickwheel.core.cron import parse_cron
from tickwheel.core.errors import ScheduleError
from tickwheel.core.ids import epoch_ms
from tickwheel.core.schedule import (
    CatchUpPolicy,
    CronSchedule,
    DstGapPolicy,
    DstRepeatPolicy,
    catch_up,
    next_fire,
    preview,
    validate,
)

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Case:
    name: str
    calendars: tuple[tuple[str, str], ...]  # (expr, zone); the first is the schedule's own
    lo: datetime
    days: int
    exclude_tz: str = "UTC"
    dates: tuple[tuple[date, date], ...] = ()
    excepts: tuple[str, ...] = ()
    skipped: tuple[datetime, ...] = ()
    gap: DstGapPolicy = DstGapPolicy.RUN_AFTER_GAP
    repeat: DstRepeatPolicy = DstRepeatPolicy.FIRST
    paused_until: datetime | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def schedule(self) -> CronSchedule:
        (expr, tz), *more = self.calendars
        exclusions = Exclusions(
            tz=self.exclude_tz,
            dates=tuple(DateRange(a, b) for a, b in self.dates),
            crons=self.excepts,
            skipped_ms=frozenset(epoch_ms(at) for at in self.skipped),
        )
        return CronSchedule(
            expr, tz, self.gap, self.repeat, calendars=tuple(Calendar(e, z) for e, z in more),
            exclusions=exclusions, paused_until=self.paused_until,
        )  # fmt: skip


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


CASES = [
    Case("weekdays and weekends with a holiday range",
         (("0 9 * * 1-5", "Europe/Paris"), ("0 11 * * 0,6", "Europe/Paris")),
         utc(2026, 12, 18), 18, exclude_tz="Europe/Paris", dates=((date(2026, 12, 24), date(2026, 12, 26)),
                                                                 (date(2027, 1, 1), date(2027, 1, 1)))),
    Case("two expressions agree: each fire once, named after the first",
         (("0 9 * * 1-5", "America/New_York"), ("0 9 * * *", "America/New_York"), ("0 9 * * 1", "America/New_York")),
         utc(2026, 6, 1), 15),
    Case("spring gap shifted, fall repeat both, except Sundays at 01:00",
         (("30 2 * * *", "America/New_York"), ("0 1 * * *", "America/New_York")), utc(2026, 3, 5), 6,
         exclude_tz="America/New_York", excepts=("0 1 * * 0",), repeat=DstRepeatPolicy.BOTH),
    Case("fall back: first and second passes with a Sunday except",
         (("30 1 * * *", "America/New_York"), ("0 6 * * 0", "America/New_York")), utc(2026, 10, 29), 6,
         exclude_tz="America/New_York", excepts=("30 1 * * 6",), repeat=DstRepeatPolicy.BOTH),
    Case("gap skipped under skip policy, second pass only",
         (("30 2 * * *", "America/New_York"), ("30 1 * * *", "America/New_York")), utc(2026, 3, 6), 3,
         gap=DstGapPolicy.SKIP, repeat=DstRepeatPolicy.SECOND),
    Case("elapsed-time expression united with a fixed time shifted into it (London spring)",
         (("*/30 * * * *", "Europe/London"), ("30 1 * * *", "Europe/London")), utc(2026, 3, 28, 20), 1,
         exclude_tz="Europe/London", excepts=("0 * * * *",)),
    Case("each expression in its own zone, holidays in a third",
         (("0 9 * * *", "Asia/Tokyo"), ("0 9 * * *", "Europe/London"), ("0 9 * * 1-5", "America/Sao_Paulo")),
         utc(2026, 3, 25), 10, exclude_tz="Australia/Lord_Howe", dates=((date(2026, 4, 3), date(2026, 4, 6)),)),
    Case("a frequent job passes a whole excluded range at once, across the spring change",
         (("*/5 * * * *", "Europe/Paris"),), utc(2026, 3, 27, 12), 3, exclude_tz="Europe/Paris",
         dates=((date(2026, 3, 28), date(2026, 3, 29)),)),
    Case("skipped occurrences and a pause window",
         (("0 */6 * * *", "UTC"), ("15 3 * * *", "Asia/Kathmandu")), utc(2026, 5, 1), 4,
         skipped=(utc(2026, 5, 1, 6), utc(2026, 5, 2, 12), utc(2026, 5, 3, 21, 30)), paused_until=utc(2026, 5, 2, 7)),
]  # fmt: skip


def reference(case: Case) -> tuple[list[tuple[datetime, str]], set[datetime]]:
    """Every fire in (lo, lo + days] with its source expression, and the fires the exclusions remove."""
    lo, hi = case.lo, case.lo + timedelta(days=case.days)
    sources: dict[datetime, str] = {}
    for text, zone in case.calendars:
        expr, tz = parse_cron(text), ZoneInfo(zone)
        instants: list[datetime] = []
        if expr.hour_star:
            minute = lo.replace(second=0, microsecond=0)
            while minute <= hi:
                if expr.matches(reading(minute, tz)):
                    instants.append(minute)
                minute += MINUTE
        else:
            local, last = reading(lo, tz).replace(second=0) - timedelta(hours=4), reading(hi, tz) + timedelta(hours=4)
            while local <= last:
                if expr.matches(local):
                    instants += instants_of(local, tz, case.gap, case.repeat)
                local += MINUTE
        for at in sorted(instants):
            if lo < at <= hi and (case.paused_until is None or at >= case.paused_until):
                sources.setdefault(at, text)
    exclude_zone = ZoneInfo(case.exclude_tz)
    excluded = {
        at for at in sources
        if at in case.skipped
        or any(a <= at.astimezone(exclude_zone).date() <= b for a, b in case.dates)
        or any(parse_cron(e).matches(reading(at, exclude_zone)) for e in case.excepts)
    }  # fmt: skip
    fires = [(at, sources[at]) for at in sorted(sources) if at not in excluded]
    return fires, excluded


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_union_minus_exclusions_matches_the_brute_force_reference(case: Case) -> None:
    expected, excluded = reference(case)
    assert expected, "a case that fires nothing tests nothing"
    schedule, hi = case.schedule(), case.lo + timedelta(days=case.days)
    walked: list[datetime] = []
    at = next_fire(schedule, case.lo)
    while at is not None and at <= hi:
        walked.append(at)
        at = next_fire(schedule, at)
    assert walked == [at for at, _ in expected]
    shown = [f for f in preview(schedule, case.lo, 1000) if f.at_utc <= hi]
    assert [(f.at_utc, f.expr) for f in shown] == expected
    with_excluded = [f for f in preview(schedule, case.lo, 1000, with_excluded=True) if f.at_utc <= hi]
    assert {f.at_utc for f in with_excluded if f.excluded} == excluded
    assert [(f.at_utc, f.expr) for f in with_excluded if not f.excluded] == expected


def test_excluded_fires_are_named_with_their_reason() -> None:
    schedule = CASES[0].schedule()
    reasons = {f.at_utc.date(): f.excluded for f in preview(schedule, utc(2026, 12, 23), 6, with_excluded=True)}
    assert reasons[date(2026, 12, 24)] == "dates 2026-12-24..2026-12-26"
    assert reasons[date(2026, 12, 23)] is None
    skipped = CASES[-1].schedule()
    assert skipped.exclusions.reason(utc(2026, 5, 1, 6)) == "skipped"
    assert CASES[2].schedule().exclusions.reason(utc(2026, 3, 8, 6))  # 01:00 EST == "except 0 1 * * 0"


def test_catch_up_runs_only_fires_that_are_not_excluded() -> None:
    schedule = CASES[-1].schedule()
    missed = catch_up(schedule, utc(2026, 5, 2, 7), utc(2026, 5, 3, 23), CatchUpPolicy.ALL, 100, None)
    assert utc(2026, 5, 2, 12) not in missed and utc(2026, 5, 3, 21, 30) not in missed


def test_the_union_of_calendars_must_respect_the_minimum_interval_too() -> None:
    apart = CronSchedule("0 * * * * *", "UTC", calendars=(Calendar("30 * * * * *", "UTC"),))
    with pytest.raises(ScheduleError) as caught:
        validate(apart, min_interval_s=60)
    assert caught.value.field == "schedule.calendars" and "30 s apart" in caught.value.message
    validate(apart, min_interval_s=30)
    agreeing = CronSchedule("0 9 * * *", "Europe/Paris", calendars=(Calendar("0 9 * * 1-5", "Europe/Paris"),))
    validate(agreeing, min_interval_s=3600)  # the same instant twice is one fire, not a zero gap
