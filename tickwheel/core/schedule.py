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


def validate(schedule: Schedule, *, min_interval_s: int = 60) -> None:
    """Raise ScheduleError (naming the field, saying why) unless `schedule` is valid and can fire."""
    validate_schedule(schedule, min_interval_s=min_interval_s)


def next_fire(schedule: Schedule, after: datetime, *, fired_count: int = 0) -> datetime | None:
    """The first fire strictly after `after` (UTC), or None when the schedule is exhausted or ended."""
    hit = _next(schedule, after, fired_count)
    return None if hit is None else hit.at


def first_fire(schedule: Schedule, now: datetime) -> datetime | None:
    """A new job's first fire: at or after `now` (a once job's `run_at` even if already past: due at once)."""
    if isinstance(schedule, OnceSchedule):
        return schedule.run_at.astimezone(UTC)
    return next_fire(schedule, now - ONE_US)


def preview(schedule: Schedule, after: datetime, count: int, *, tz: str | None = None) -> list[Fire]:
    """The next `count` (at most 1000) fires after `after`, each in UTC and local time with its DST flag;
    `tz` is the display zone for once and interval schedules (UTC by default)."""
    zone = load_zone(schedule.tz if isinstance(schedule, CronSchedule) else (tz or "UTC"))
    fires: list[Fire] = []
    cursor = after
    for fired in range(min(count, MAX_PREVIEW)):
        hit = _next(schedule, cursor, fired)
        if hit is None:
            break
        fires.append(Fire(hit.at, hit.at.astimezone(zone), None if hit.dst is None else str(hit.dst)))
        cursor = hit.at
    return fires


def _next(schedule: Schedule, after: datetime, fired_count: int) -> Hit | None:
    require_aware(after, "after")
    if isinstance(schedule, OnceSchedule):
        run_at = schedule.run_at.astimezone(UTC)
        return Hit(run_at, None) if fired_count == 0 and run_at > after else None
    if schedule.max_runs is not None and fired_count >= schedule.max_runs:
        return None
    lower = after if schedule.start_at is None else max(after, schedule.start_at - ONE_US)
    if isinstance(schedule, CronSchedule):
        hit = next_hit(_rules(schedule.expr, schedule.tz, schedule.dst_gap, schedule.dst_repeat), lower)
    else:
        hit = Hit(_next_interval(schedule, lower), None)
    if hit is None or (schedule.end_at is not None and hit.at > schedule.end_at):
        return None
    return hit


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
