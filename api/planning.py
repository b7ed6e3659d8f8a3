"""Which run a job gets next, as a `NewRun` (its announcement goes through `tickwheel.bus.near.NearAnnouncer`).

Time is an argument everywhere here; the handlers pass the API's clock.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

from schemas.messages import JobDefinition
from tickwheel.core.ids import run_id_for
from tickwheel.core.policies import CatchUpPolicy
from tickwheel.core.schedule import OnceSchedule, Schedule, catch_up, first_fire, next_fire
from tickwheel.model import catch_up_of, lane_of, recurs, tolerance_ms_of
from tickwheel.store.runs import NewRun

log = logging.getLogger(__name__)


def to_ms(at: datetime) -> datetime:
    """Cassandra keeps milliseconds; plan on what will be stored."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


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


def plan_run(
    job_id: uuid.UUID, tenant_id: str, shard: int, version: int, definition: JobDefinition, at: datetime
) -> NewRun:
    at = to_ms(at.astimezone(UTC))
    return NewRun(
        run_id=run_id_for(job_id, at),
        job_id=job_id,
        tenant_id=tenant_id,
        job_version=version,
        shard=shard,
        lane=lane_of(definition),
        scheduled_at=at,
        fire_at=at,
        tolerance_ms=tolerance_ms_of(definition),
        recurring=recurs(definition),
    )
