"""Records for tests that need a job and its runs without the API: the same shapes the API writes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.messages import HttpTarget, JobDefinition, RetryDoc, ScheduleDoc
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.ids import shard_of
from tickwheel.core.instants import whole_ms
from tickwheel.store.jobs import occurrence_run
from tickwheel.store.records import Job, JobState, NewRun

SHARDS = 1024


def definition(
    *, every_s: int | None = 60, url: str = "https://example.com/hook", anchor: datetime | None = None, **fields: Any
) -> JobDefinition:
    """An interval job every `every_s` seconds (a once job when None) calling `url`."""
    at = (anchor or datetime(2026, 1, 1, tzinfo=UTC)).isoformat()
    if every_s is None:
        schedule = ScheduleDoc(type="once", run_at=at)
    else:
        schedule = ScheduleDoc(
            type="interval", every_s=every_s, anchor_at=at, catch_up=fields.pop("catch_up", "latest")
        )
    retry = fields.pop("retry_policy", RetryDoc())
    return JobDefinition(schedule=schedule, target=HttpTarget(url=url), retry_policy=retry, **fields)


def job(
    first_at: datetime,
    *,
    tenant_id: str = "t",
    version: int = 1,
    state: JobState = JobState.ACTIVE,
    fired_count: int = 0,
    job_definition: JobDefinition | None = None,
    retention_s: int = RUN_RETENTION_S,
) -> tuple[Job, NewRun]:
    """A new job whose next run is its occurrence at `first_at` (kept `retention_s`), and that run."""
    job_id = uuid.uuid4()
    spec = job_definition or definition(anchor=first_at)
    shard = shard_of(job_id, SHARDS)
    run = occurrence_run(job_id, tenant_id, shard, version, spec, first_at, retention_s=retention_s)
    made = Job(
        job_id=job_id, tenant_id=tenant_id, shard=shard, state=state, version=version, definition=spec,
        lane=spec.priority, next_run_at=run.scheduled_at, next_run_id=run.run_id, fired_count=fired_count,
        last_run_id=None, last_run_status=None, created_at=whole_ms(first_at), updated_at=whole_ms(first_at),
    )  # fmt: skip
    return made, run


def minute(at: datetime, minutes: int = 0) -> datetime:
    """`at`'s minute, plus `minutes`."""
    return at.replace(second=0, microsecond=0) + timedelta(minutes=minutes)
