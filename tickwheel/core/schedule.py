"""Schedules — once, cron in an IANA zone, fixed interval — and when they fire.

All instants crossing this boundary are timezone-aware; results are in UTC. Time is always an argument.
"""

from __future__ import annotations

import functools
from collections import deque
from datetime import UTC, datetime, timedelta

from tickwheel.core.cron import parse_cron
from tickwheel.core.errors import ScheduleError
from tickwheel.core.instants import parse_instant, require_aware
from tickwheel.core.occurrence import Hit, Rules, next_hit
from tickwheel.core.policies import CatchUpPolicy, DstFlag, DstGapPolicy, DstRepeatPolicy
from tickwheel.core.specs import CronSchedule, Fire, IntervalSchedule, OnceSchedule, Schedule
from tickwheel.core.validation import validate_schedule
from tickwheel.core.zones import load_zone

__all__ = [
    "CatchUpPolicy",
    "CronSchedule",
    "DstFlag",
    "DstGapPolicy",
    "DstRepeatPolicy",
    "Fire",
    "IntervalSchedule",
    "OnceSchedule",
    "Schedule",
    "ScheduleError",
    "catch_up",
    "first_fire",
    "next_fire",
    "parse_instant",
    "preview",
    "validate",
]

ONE_US = timedelta(microseconds=1)
MAX_PREVIEW = 1000
MAX_CATCH_UP_STEPS = 20_000
UNION_SAMPLE = 200
UNION_REFERENCE = datetime(2026, 1, 1, tzinfo=UTC)
MAX_EXCLUDED_STEPS = 2_000  # excluded fires passed over in one search (an excluded date range counts as one)


def validate(schedule: Schedule, *, min_interval_s: int = 60) -> None:
    """Raise ScheduleError (naming the field, saying why) unless `schedule` is valid and can fire."""
    validate_schedule(schedule, min_interval_s=min_interval_s)
    if isinstance(schedule, CronSchedule) and schedule.calendars:
        _check_union_gap(schedule, min_interval_s)


def _check_union_gap(schedule: CronSchedule, min_interval_s: int) -> None:
    """Each expression respects the minimum interval on its own (validate_schedule); their union must too. Checked
    on the first UNION_SAMPLE fires from startAt (else a fixed reference instant): enough for the regular
    patterns cron can write, not a proof for every date."""
    cursor = schedule.start_at or UNION_REFERENCE
    found = _union_next(schedule, cursor)
    for _ in range(UNION_SAMPLE):
        if found is None:
            return
        following = _union_next(schedule, found[0].at)
        if following is None:
            return
        gap_s = (following[0].at - found[0].at).total_seconds()
        if gap_s < min_interval_s:
            at = found[0].at.isoformat()
            message = (
                f"{found[1]!r} and {following[1]!r} fire {gap_s:g} s apart (at {at}), more often than the"
                f" minimum of {min_interval_s} s"
            )
            raise ScheduleError("schedule.calendars", message)
        found = following


def next_fire(schedule: Schedule, after: datetime, *, fired_count: int = 0) -> datetime | None:
    """The first fire strictly after `after` (UTC), or None when the schedule is exhausted or ended."""
    hit = _next(schedule, after, fired_count)
    return None if hit is None else hit.at


def first_fire(schedule: Schedule, now: datetime) -> datetime | None:
    """A new job's first fire: at or after `now` (a once job's `run_at` even if already past: due at once)."""
    if isinstance(schedule, OnceSchedule):
        return schedule.run_at.astimezone(UTC)
    return next_fire(schedule, now - ONE_US)


def preview(
    schedule: Schedule, after: datetime, count: int, *, tz: str | None = None, with_excluded: bool = False
) -> list[Fire]:
    """The next `count` (at most 1000) fires after `after`, each in UTC and local time with its DST flag and
    the expression that produced it; `tz` is the display zone for once and interval schedules (UTC by default).
    `with_excluded` also lists, in order, the fires the exclusions remove (`Fire.excluded` says why; at most
    `count` of them)."""
    zone = load_zone(schedule.tz if isinstance(schedule, CronSchedule) else (tz or "UTC"))
    fires: list[Fire] = []
    cursor, fired, excluded = after, 0, 0
    while fired < min(count, MAX_PREVIEW):
        found = _next_sourced(schedule, cursor, fired, keep_excluded=with_excluded and excluded < count)
        if found is None:
            break
        hit, expr, reason = found
        fires.append(Fire(hit.at, hit.at.astimezone(zone), None if hit.dst is None else str(hit.dst), expr, reason))
        fired, excluded = (fired, excluded + 1) if reason else (fired + 1, excluded)
        cursor = hit.at
    return fires


def _next(schedule: Schedule, after: datetime, fired_count: int) -> Hit | None:
    found = _next_sourced(schedule, after, fired_count)
    return None if found is None else found[0]


def _next_sourced(
    schedule: Schedule, after: datetime, fired_count: int, *, keep_excluded: bool = False
) -> tuple[Hit, str | None, str | None] | None:
    """The next fire after `after` with the expression that produced it; excluded fires are passed over (or,
    with `keep_excluded`, returned with their reason)."""
    require_aware(after, "after")
    if isinstance(schedule, OnceSchedule):
        run_at = schedule.run_at.astimezone(UTC)
        return (Hit(run_at, None), None, None) if fired_count == 0 and run_at > after else None
    if schedule.max_runs is not None and fired_count >= schedule.max_runs:
        return None
    floors = [t - ONE_US for t in (schedule.start_at, schedule.paused_until) if t is not None]
    lower = max([after, *floors])
    for _ in range(MAX_EXCLUDED_STEPS):
        found = _union_next(schedule, lower)
        if found is None or (schedule.end_at is not None and found[0].at > schedule.end_at):
            return None
        reason = schedule.exclusions.reason(found[0].at) if schedule.exclusions else None
        if reason is None or keep_excluded:
            return found[0], found[1], reason
        lower = schedule.exclusions.search_from(found[0].at)
    return None


def _union_next(schedule: CronSchedule | IntervalSchedule, after: datetime) -> tuple[Hit, str | None] | None:
    """The earliest fire after `after` over the job's expressions; on a tie the first listed is the source."""
    if isinstance(schedule, IntervalSchedule):
        return Hit(_next_interval(schedule, after), None), None
    best: tuple[Hit, str | None] | None = None
    for expr, tz in ((schedule.expr, schedule.tz), *((c.expr, c.tz) for c in schedule.calendars)):
        hit = next_hit(_rules(expr, tz, schedule.dst_gap, schedule.dst_repeat), after)
        if hit is not None and (best is None or hit.at < best[0].at):
            best = hit, expr
    return best


def _next_interval(schedule: IntervalSchedule, after: datetime) -> datetime:
    anchor = schedule.anchor_at.astimezone(UTC)
    if after < anchor:
        return anchor
    every_us = schedule.every_s * 1_000_000
    steps = (after - anchor) // ONE_US // every_us + 1
    return anchor + timedelta(microseconds=steps * every_us)


@functools.lru_cache(maxsize=4096)
def _rules(expr: str, tz: str, gap: DstGapPolicy, repeat: DstRepeatPolicy) -> Rules:
    return Rules.of(parse_cron(expr), load_zone(tz), gap, repeat)


def catch_up(
    schedule: Schedule,
    last_fired: datetime | None,
    now: datetime,
    policy: CatchUpPolicy = CatchUpPolicy.LATEST,
    max_count: int = 10,
    max_age_s: float | None = 86400.0,
) -> list[datetime]:
    """Missed fires to run now, oldest first: in (last_fired, now], none older than `max_age_s`; LATEST keeps
    the newest, ALL the newest `max_count`, SKIP nothing. No last fire and no age limit: nothing is missed."""
    if policy is CatchUpPolicy.SKIP or max_count <= 0:
        return []
    keep = 1 if policy is CatchUpPolicy.LATEST else min(max_count, MAX_PREVIEW)
    oldest = None if max_age_s is None else now - timedelta(seconds=max_age_s)
    floors = [t for t in (last_fired, oldest) if t is not None]
    if not floors:
        return []
    floor = max(floors)
    window = timedelta(minutes=1)
    while True:  # widen a window back from `now` until it holds `keep` fires or reaches the floor
        lo = max(floor, now - window)
        found = _fires_between(schedule, lo, now, keep)
        if len(found) >= keep or lo == floor:
            return found
        window *= 8


def _fires_between(schedule: Schedule, lo: datetime, hi: datetime, keep: int) -> list[datetime]:
    """The newest `keep` fires in (lo, hi], oldest first; the walk is capped at MAX_CATCH_UP_STEPS fires."""
    newest: deque[datetime] = deque(maxlen=keep)
    cursor = lo
    for _ in range(MAX_CATCH_UP_STEPS):
        at = next_fire(schedule, cursor)
        if at is None or at > hi:
            break
        newest.append(at)
        cursor = at
    return list(newest)
