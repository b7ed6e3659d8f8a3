"""Up-front validation of schedules with precise, user-facing errors (field + why)."""

from __future__ import annotations

import itertools
from datetime import timedelta

from tickwheel.core.cron import CronExpr, parse_cron
from tickwheel.core.errors import ScheduleError
from tickwheel.core.instants import require_aware
from tickwheel.core.occurrence import Rules, next_hit
from tickwheel.core.specs import CronSchedule, IntervalSchedule, OnceSchedule, Schedule
from tickwheel.core.zones import load_zone

DAY_S = 86400


def validate_schedule(schedule: Schedule, *, min_interval_s: int) -> None:
    """Raise ScheduleError unless `schedule` is well formed, fires at all, and not more often than allowed."""
    if isinstance(schedule, OnceSchedule):
        require_aware(schedule.run_at, "schedule.run_at")
        return
    _check_window(schedule)
    _check_sizes(schedule)
    if isinstance(schedule, IntervalSchedule):
        require_aware(schedule.anchor_at, "schedule.anchor_at")
        if schedule.every_s < max(1, min_interval_s):
            raise ScheduleError(
                "schedule.every_s", f"interval {schedule.every_s} s is below the minimum of {min_interval_s} s"
            )
        return
    expr = parse_cron(schedule.expr)
    tz = load_zone(schedule.tz)
    _check_gap(expr, min_interval_s, "schedule.expr")
    for i, calendar in enumerate(schedule.calendars):
        field = f"schedule.calendars[{i}]"
        try:
            _check_gap(parse_cron(calendar.expr), min_interval_s, f"{field}.expr")
        except ScheduleError as exc:
            raise ScheduleError(f"{field}.expr", exc.message) from None
        load_zone(calendar.tz, f"{field}.tz")
    if schedule.start_at is not None and schedule.end_at is not None:
        first = next_hit(
            Rules.of(expr, tz, schedule.dst_gap, schedule.dst_repeat), schedule.start_at - timedelta(microseconds=1)
        )
        if first is None or first.at > schedule.end_at:
            raise ScheduleError("schedule.end_at", "the expression never fires between start_at and end_at")


MAX_CALENDARS = 20
MAX_EXCLUDED_DATES = 1000
MAX_EXCEPTS = 20
MAX_SKIPPED = 1000


def _check_sizes(schedule: CronSchedule | IntervalSchedule) -> None:
    """Bounds that keep every search over the union and its exclusions short."""
    calendars = schedule.calendars if isinstance(schedule, CronSchedule) else ()
    exclusions = schedule.exclusions
    for field, size, limit in (
        ("schedule.calendars", len(calendars), MAX_CALENDARS),
        ("schedule.exclude.dates", len(exclusions.dates), MAX_EXCLUDED_DATES),
        ("schedule.exclude.except", len(exclusions.crons), MAX_EXCEPTS),
        ("schedule.skip", len(exclusions.skipped_ms), MAX_SKIPPED),
    ):
        if size > limit:
            raise ScheduleError(field, f"at most {limit} entries, not {size}")


def _check_gap(expr: CronExpr, min_interval_s: int, field: str) -> None:
    gap_s = min_gap_s(expr)
    if gap_s < min_interval_s:
        message = f"{expr.text!r} fires every {gap_s} s, more often than the minimum of {min_interval_s} s"
        raise ScheduleError(field, message)


def _check_window(schedule: CronSchedule | IntervalSchedule) -> None:
    if schedule.start_at is not None:
        require_aware(schedule.start_at, "schedule.start_at")
    if schedule.end_at is not None:
        require_aware(schedule.end_at, "schedule.end_at")
        if schedule.start_at is not None and schedule.end_at <= schedule.start_at:
            raise ScheduleError("schedule.end_at", "end_at must be after start_at")
    if schedule.max_runs is not None and schedule.max_runs < 1:
        raise ScheduleError("schedule.max_runs", "max_runs must be at least 1")


def min_gap_s(expr: CronExpr) -> int:
    """The shortest wall-clock gap in seconds between two fires of `expr` (assuming consecutive days match)."""
    times = sorted(h * 3600 + m * 60 + s for h in expr.hours for m in expr.minutes for s in expr.seconds)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    gaps.append(DAY_S - times[-1] + times[0])
    return min(gaps)
