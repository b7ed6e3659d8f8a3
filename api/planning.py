"""Which run a job gets next, as a `NewRun`, and its announcement on the near-term topic.

Time is an argument everywhere here; the handlers pass the API's clock.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime, timedelta

from schemas.messages import DueRun, JobDefinition, topic_names
from tickwheel import metrics
from tickwheel.bus.near import announce
from tickwheel.core.ids import epoch_ms, run_id_for
from tickwheel.core.policies import CatchUpPolicy
from tickwheel.core.schedule import OnceSchedule, Schedule, catch_up, first_fire, next_fire
from tickwheel.errors import TickwheelError
from tickwheel.model import catch_up_of, lane_of, tolerance_ms_of
from tickwheel.store.runs import NewRun

from .context import Api

log = logging.getLogger(__name__)

NEAR_MARGIN_S = 5  # a run a little past the dispatchers' horizon may already be inside it when they rescan
ANNOUNCE_TIMEOUT_S = 3.0


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
    policy, max_count, max_age_s = catch_up_of(definition)
    if policy is CatchUpPolicy.ALL and not isinstance(schedule, OnceSchedule):
        missed = catch_up(schedule, paused_at, now, policy, max_count, max_age_s)
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
    )


def due_run_of(run: NewRun, attempt: int = 0, fire_at: datetime | None = None) -> DueRun:
    return DueRun(
        run_id=run.run_id,
        job_id=run.job_id,
        tenant_id=run.tenant_id,
        shard=run.shard,
        attempt=attempt,
        kind="run",
        lane=run.lane,  # type: ignore[arg-type]
        job_version=run.job_version,
        scheduled_at_ms=epoch_ms(run.scheduled_at),
        fire_at_ms=epoch_ms(fire_at or run.fire_at),
        tolerance_ms=run.tolerance_ms,
    )


def is_near(api: Api, fire_at: datetime, now: datetime) -> bool:
    horizon = timedelta(seconds=api.settings.dispatcher.preload_horizon_s + NEAR_MARGIN_S)
    return fire_at <= now + horizon


async def announce_if_near(api: Api, due: DueRun, now: datetime) -> None:
    """Announce a durably written run that the dispatchers may already have preloaded past.

    A failure is logged, not answered: the run is durable, and the dispatchers' rescan finds it.
    """
    fire_at = datetime.fromtimestamp(due.fire_at_ms / 1000, UTC)
    if not is_near(api, fire_at, now):
        return
    topic = topic_names(api.settings.kafka.topic_prefix)["near"]
    send = announce(api.producer, topic, due, partitions=api.settings.kafka.near_partitions, shards=api.settings.shards)
    try:
        await asyncio.wait_for(send, ANNOUNCE_TIMEOUT_S)
    except (TickwheelError, TimeoutError) as exc:
        log.warning(
            "near-term announcement failed; the rescan will find the run: %s",
            exc,
            extra={"tenant": due.tenant_id, "job_id": due.job_id, "run_id": due.run_id},
        )
        return
    metrics.near_announced.inc()
