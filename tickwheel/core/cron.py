"""Cron expressions on local wall-clock time: parsing, matching and a bounded next-match search.

Grammar (Vixie cron plus the Quartz extensions people expect):

- 5 fields `minute hour day-of-month month day-of-week`, or 6 fields with a leading `second` field.
- lists `1,5`, ranges `1-5`, steps `*/15`, `10-40/5`, `7/10` (from 7 to the end), names `JAN`..`DEC`, `SUN`..`SAT`.
- day of month: `L` (last day), `L-3` (three days before the last), `15W` (weekday nearest the 15th, never
  leaving the month), `LW` (last weekday); `?` means `*`.
- day of week: 0-7 (0 and 7 are Sunday), `5L` (last Friday of the month), `1#2` (second Monday).
- macros `@yearly` `@annually` `@monthly` `@weekly` `@daily` `@midnight` `@hourly`.
- when both day fields are restricted a day matches if *either* matches (Vixie's OR); a field written with a
  leading `*` (including `*/2`) makes it an AND instead, as in Vixie cron, so `0 0 */2 * *` fires on odd days.
- ASCII only, at most MAX_EXPR_CHARS characters; digits are `0`-`9` (not `²`, full-width or Arabic-Indic).

This module knows nothing about time zones: it answers questions about naive wall-clock readings.
"""

from __future__ import annotations

import calendar
import functools
from bisect import bisect_left
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from tickwheel.core.errors import ScheduleError

FIELD = "schedule.expr"
MAX_EXPR_CHARS = 256
MAX_SEARCH_MONTHS = 12 * 120  # the rarest valid pattern (5th Monday of February) recurs within 40 years

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = {n.upper(): i for i, n in enumerate(calendar.month_abbr) if n}
DOW_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
MONTH_DAYS_MAX = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True, slots=True)
class DomSpec:
    """Day-of-month rules: plain days, `L`/`L-n` offsets from the end, `nW` nearest weekdays, `LW`."""

    days: frozenset[int] = frozenset()
    from_last: frozenset[int] = frozenset()
    nearest_weekday: frozenset[int] = frozenset()
    last_weekday: bool = False


@dataclass(frozen=True, slots=True)
class DowSpec:
    """Day-of-week rules (0 = Sunday): plain weekdays, `d#n` nth weekday, `dL` last weekday of the month."""

    days: frozenset[int] = frozenset()
    nth: frozenset[tuple[int, int]] = frozenset()
    last: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed cron expression; `hour_star` marks jobs that fire by elapsed time through DST changes."""

    text: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    dom: DomSpec
    dow: DowSpec
    dom_star: bool
    dow_star: bool
    hour_star: bool

    def matches(self, at: datetime) -> bool:
        """True when the naive wall-clock reading `at` (whole seconds) matches every field."""
        return (
            at.second in self.seconds
            and at.minute in self.minutes
            and at.hour in self.hours
            and at.month in self.months
            and at.day in days_in_month(self, at.year, at.month)
        )

    def next_match(self, start: datetime) -> datetime | None:
        """The first matching naive reading at or after `start` (rounded up to a second), None past the bound."""
        if start.microsecond:
            start = start.replace(microsecond=0) + timedelta(seconds=1)
        year, month, from_day = start.year, start.month, start.day
        from_time: time | None = start.time()
        for _ in range(MAX_SEARCH_MONTHS):
            if month in self.months:
                found = self._first_in_month(year, month, from_day, from_time)
                if found is not None:
                    return found
            from_day, from_time = 1, None
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            if year > 9998:
                return None
        return None

    def _first_in_month(self, year: int, month: int, from_day: int, from_time: time | None) -> datetime | None:
        days = days_in_month(self, year, month)
        for day in days[bisect_left(days, from_day) :]:
            at = self._first_time(from_time if day == from_day else None)
            if at is not None:
                return datetime.combine(date(year, month, day), at)
        return None

    def _first_time(self, start: time | None) -> time | None:
        if start is None:
            return time(self.hours[0], self.minutes[0], self.seconds[0])
        for hour in self.hours[bisect_left(self.hours, start.hour) :]:
            m0 = start.minute if hour == start.hour else 0
            for minute in self.minutes[bisect_left(self.minutes, m0) :]:
                s0 = start.second if (hour, minute) == (start.hour, start.minute) else 0
                i = bisect_left(self.seconds, s0)
                if i < len(self.seconds):
                    return time(hour, minute, self.seconds[i])
        return None


@functools.lru_cache(maxsize=1024)
def parse_cron(text: str) -> CronExpr:
    """Parse a cron expression, raising ScheduleError that names the bad field and says why. Kept for the next
    call with the same text (a CronExpr is immutable): a create parses its expression three times (validation,
    the schedule, the gap check) and most jobs share a few dozen expressions."""
    if len(text) > MAX_EXPR_CHARS:
        # the message does not quote the input: it may be megabytes long
        raise ScheduleError(FIELD, f"expression is {len(text)} characters long; at most {MAX_EXPR_CHARS}")
    _check_ascii(text)
    raw = " ".join(text.split())
    body = MACROS.get(raw.lower(), raw)
    if body.startswith("@"):
        raise ScheduleError(FIELD, f"unknown macro {raw!r}; use one of {', '.join(sorted(MACROS))}")
    parts = body.split(" ")
    if len(parts) == 5:
        parts = ["0", *parts]
    if len(parts) != 6:
        raise ScheduleError(FIELD, f"expected 5 fields (or 6 with leading seconds), got {len(parts)}: {raw!r}")
    sec, minute, hour, dom, month, dow = parts
    expr = CronExpr(
        text=raw,
        seconds=tuple(sorted(_plain_field(sec, "second", 0, 59))),
        minutes=tuple(sorted(_plain_field(minute, "minute", 0, 59))),
        hours=tuple(sorted(_plain_field(hour, "hour", 0, 23))),
        months=frozenset(_plain_field(month, "month", 1, 12, MONTH_NAMES)),
        dom=_dom_field(dom),
        dow=_dow_field(dow),
        dom_star=dom[0] in "*?",
        dow_star=dow[0] in "*?",
        hour_star=hour[0] == "*",
    )
    _check_can_fire(expr)
    return expr


CRON_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")


def _check_ascii(text: str) -> None:
    """Refuse any non-ASCII character, naming the cron field it is in: `str.isdigit` and `str.upper` would
    otherwise let `²`, full-width digits or `sun` spelt with a long s through, or fail with a bare ValueError."""
    if text.isascii():
        return
    parts = text.split()
    names = {5: CRON_FIELD_NAMES, 6: ("second", *CRON_FIELD_NAMES)}.get(len(parts), ())
    for name, part in zip(names, parts, strict=False):
        if not part.isascii():
            raise ScheduleError(FIELD, f"{name} field: {part!r} has a non-ASCII character; use 0-9 and ASCII names")
    raise ScheduleError(FIELD, "expression has a non-ASCII character; use 0-9, ASCII names and spaces")


def _plain_field(text: str, name: str, lo: int, hi: int, names: dict[str, int] | None = None) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        values |= _range_item(item, name, lo, hi, names)
    return values


def _range_item(item: str, name: str, lo: int, hi: int, names: dict[str, int] | None) -> set[int]:
    base, _, step_text = item.partition("/")
    step = _number(step_text, name, 1, hi - lo + 1, "step") if step_text else 1
    if base in ("*", "?"):
        first, last = lo, hi
    elif "-" in base:
        a, _, b = base.partition("-")
        first, last = _value(a, name, lo, hi, names), _value(b, name, lo, hi, names)
        if first > last:
            raise ScheduleError(FIELD, f"{name} field {item!r}: range start {a} is after its end {b}")
    else:
        first = _value(base, name, lo, hi, names)
        last = hi if step_text else first
    return set(range(first, last + 1, step))


def _value(text: str, name: str, lo: int, hi: int, names: dict[str, int] | None) -> int:
    if names and text.upper() in names:
        return names[text.upper()]
    return _number(text, name, lo, hi, "value")


def _number(text: str, name: str, lo: int, hi: int, what: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ScheduleError(FIELD, f"{name} field: {text!r} is not a valid {what}")
    value = int(text)
    if not lo <= value <= hi:
        raise ScheduleError(FIELD, f"{name} field: {what} {value} is out of range {lo}-{hi}")
    return value


def _dom_field(text: str) -> DomSpec:
    days: set[int] = set()
    from_last: set[int] = set()
    nearest: set[int] = set()
    last_weekday = False
    for item in text.upper().split(","):
        if item == "LW":
            last_weekday = True
        elif item == "L" or item.startswith("L-"):
            from_last.add(_number(item[2:], "day-of-month", 0, 30, "offset") if item != "L" else 0)
        elif item.endswith("W"):
            nearest.add(_number(item[:-1], "day-of-month", 1, 31, "value"))
        else:
            days |= _range_item(item, "day-of-month", 1, 31, None)
    return DomSpec(frozenset(days), frozenset(from_last), frozenset(nearest), last_weekday)


def _dow_field(text: str) -> DowSpec:
    days: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for item in text.upper().split(","):
        if "#" in item:
            d, _, n = item.partition("#")
            nth.add((_value(d, "day-of-week", 0, 7, DOW_NAMES) % 7, _number(n, "day-of-week", 1, 5, "nth")))
        elif item.endswith("L") and len(item) > 1:
            last.add(_value(item[:-1], "day-of-week", 0, 7, DOW_NAMES) % 7)
        else:
            days |= {d % 7 for d in _range_item(item, "day-of-week", 0, 7, DOW_NAMES)}
    return DowSpec(frozenset(days), frozenset(nth), frozenset(last))


def _check_can_fire(expr: CronExpr) -> None:
    """Reject day-of-month rules that no allowed month can ever satisfy (`0 0 31 2 *`, `0 0 30 2 *`)."""
    if expr.dom_star or not expr.dow_star:
        return  # a weekday rule always finds a day in every month, eventually
    dom = expr.dom
    if dom.last_weekday or any(k < MONTH_DAYS_MAX[m] for m in expr.months for k in dom.from_last):
        return
    wanted = dom.days | dom.nearest_weekday
    if any(day <= MONTH_DAYS_MAX[m] for m in expr.months for day in wanted):
        return
    months = ", ".join(calendar.month_abbr[m] for m in sorted(expr.months))
    days = ", ".join(str(d) for d in sorted(wanted))
    raise ScheduleError(FIELD, f"never fires: day {days} does not exist in {months}")


@functools.lru_cache(maxsize=4096)
def days_in_month(expr: CronExpr, year: int, month: int) -> tuple[int, ...]:
    """The sorted days of (year, month) on which `expr` may fire, applying Vixie's day OR rule."""
    ndays = calendar.monthrange(year, month)[1]
    dom_days = _dom_days(expr.dom, year, month, ndays)
    dow_days = _dow_days(expr.dow, year, month, ndays)
    chosen = dom_days & dow_days if expr.dom_star or expr.dow_star else dom_days | dow_days
    return tuple(sorted(chosen))


def _dom_days(dom: DomSpec, year: int, month: int, ndays: int) -> set[int]:
    days = {d for d in dom.days if d <= ndays}
    days |= {ndays - k for k in dom.from_last if ndays - k >= 1}
    days |= {_nearest_weekday(year, month, d, ndays) for d in dom.nearest_weekday if d <= ndays}
    if dom.last_weekday:
        days.add(_nearest_weekday(year, month, ndays, ndays))
    return days


def _nearest_weekday(year: int, month: int, day: int, ndays: int) -> int:
    weekday = date(year, month, day).weekday()  # Monday = 0
    if weekday == 5:  # Saturday: Friday before, unless that leaves the month
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: Monday after, unless that leaves the month
        return day + 1 if day < ndays else day - 2
    return day


def _dow_days(dow: DowSpec, year: int, month: int, ndays: int) -> set[int]:
    first_cron_dow = (date(year, month, 1).weekday() + 1) % 7
    days: set[int] = set()
    for day in range(1, ndays + 1):
        cron_dow = (first_cron_dow + day - 1) % 7
        nth = (day - 1) // 7 + 1
        if cron_dow in dow.days or (cron_dow, nth) in dow.nth or (cron_dow in dow.last and day + 7 > ndays):
            days.add(day)
    return days
