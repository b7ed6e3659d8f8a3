"""Backfill: the occurrences a schedule would have made in a past range, and when each runs now.

Pure: the range, the schedule and `now` are arguments. The schedule's DST policy, calendars, exclusions and skips
apply (what would not have run is not backfilled); a pause does not (it is about the present). The runs start at
`now`, spread evenly over the job's delay tolerance so a large backfill does not land in one second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwheel.core.schedule import ONE_US, next_fire
from tickwheel.core.specs import CronSchedule, IntervalSchedule

# How far a refused backfill counts before saying "more than": the count runs on the API's event loop (~0.1 ms an
# occurrence, more on a loaded box), and counting to 100,000 stalled every request of the process for 10-15 s.
MAX_COUNTED = 5_000


@dataclass(frozen=True, slots=True)
class BackfillRun:
    """One backfilled occurrence: its instant (the run's scheduled time) and when it fires."""

    scheduled_at: datetime
    fire_at: datetime


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """The runs of a backfill, or, when the range holds more than the limit, how many it holds (`counted`,
    at most MAX_COUNTED + 1 meaning "more than MAX_COUNTED")."""

    runs: tuple[BackfillRun, ...]
    counted: int

    @property
    def over_limit(self) -> bool:
        return self.counted > len(self.runs)


def occurrences_between(
    schedule: CronSchedule | IntervalSchedule, start: datetime, end: datetime, limit: int
) -> list[datetime]:
    """The schedule's fires in [start, end), at most `limit` of them, oldest first (the pause ignored)."""
    unpaused = dataclasses.replace(schedule, paused_until=None, max_runs=None)
    found: list[datetime] = []
    at = next_fire(unpaused, start - ONE_US)
    while at is not None and at < end and len(found) < limit:
        found.append(at)
        at = next_fire(unpaused, at)
    return found


def plan_backfill(
    schedule: CronSchedule | IntervalSchedule,
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    tolerance_s: int,
    limit: int,
) -> BackfillPlan:
    """The runs for the occurrences in [start, end): run k of n fires at now + tolerance * k / n."""
    found = occurrences_between(schedule, start, end, limit + 1)
    if len(found) > limit:
        return BackfillPlan((), len(occurrences_between(schedule, start, end, MAX_COUNTED + 1)))
    spread = timedelta(seconds=tolerance_s)
    runs = tuple(BackfillRun(at, now + spread * k / len(found)) for k, at in enumerate(found))
    return BackfillPlan(runs, len(runs))
