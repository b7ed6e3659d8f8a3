"""The schedule records: immutable, typed, changed with dataclasses.replace()."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from tickwheel.core.calendars import NO_EXCLUSIONS, Calendar, Exclusions
from tickwheel.core.policies import DstGapPolicy, DstRepeatPolicy


@dataclass(frozen=True, slots=True)
class OnceSchedule:
    """Fire once at `run_at` (aware)."""

    run_at: datetime


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """Fire when the wall clock in IANA zone `tz` matches `expr` or one of `calendars` (each in its own zone),
    with the DST policy (docs/time.md), except the `exclusions`; nothing before `paused_until`."""

    expr: str
    tz: str
    dst_gap: DstGapPolicy = DstGapPolicy.RUN_AFTER_GAP
    dst_repeat: DstRepeatPolicy = DstRepeatPolicy.FIRST
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    calendars: tuple[Calendar, ...] = ()
    exclusions: Exclusions = NO_EXCLUSIONS
    paused_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Fire at `anchor_at + k * every_s` for k >= 0: elapsed time, no zone, no DST."""

    every_s: int
    anchor_at: datetime
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    exclusions: Exclusions = NO_EXCLUSIONS
    paused_until: datetime | None = None


Schedule: TypeAlias = OnceSchedule | CronSchedule | IntervalSchedule


@dataclass(frozen=True, slots=True)
class Fire:
    """One previewed fire: the UTC instant, the same instant in the job's zone, the DST flag if any, the
    expression that produced it (cron jobs) and, for a fire that will not run, why (`Exclusions.reason`)."""

    at_utc: datetime
    local: datetime
    dst: str | None
    expr: str | None = None
    excluded: str | None = None
