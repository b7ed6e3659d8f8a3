"""Which occurrence a job gets next (its run is made by `tickwheel.store.jobs.occurrence_run`; its announcement goes
through `tickwheel.bus.near.NearAnnouncer`).

Time is an argument everywhere here; the handlers pass the API's clock.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from schemas.messages import JobDefinition
from tickwheel.core.policies import CatchUpPolicy
from tickwheel.core.schedule import OnceSchedule, Schedule, catch_up, first_fire, next_fire
from tickwheel.model import catch_up_of

log = logging.getLogger(__name__)


def next_at(schedule: Schedule, now: datetime, fired_count: int) -> datetime | None:
    """The next occurrence at or after `now` (a once job: its runAt, even if past, which means at once)."""
    if isinstance(schedule, OnceSchedule):
        return first_fire(schedule, now) if fired_count == 0 else None
    return next_fire(schedule, now - timedelta(microseconds=1), fired_count=fired_count)


def resume_at(
    definition: JobDefinition, schedule: Schedule, paused_at: datetime, now: datetime, fired_count: int
) -> datetime | None:
    """On resume: with catch-up `all`, the oldest occurrence missed while paused (bounded by its limits);
    otherwise (`latest`, `none`) the next occurrence from now: a pause means its occurrences were not wanted."""
    rule = catch_up_of(definition)
    if rule.policy is CatchUpPolicy.ALL and not isinstance(schedule, OnceSchedule):
        missed = catch_up(schedule, paused_at, now, rule.policy, rule.max_count, rule.max_age_s)
        if missed:
            return missed[0]
    return next_at(schedule, now, fired_count)
