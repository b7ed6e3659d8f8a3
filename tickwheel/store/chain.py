"""Chaining recurring jobs at fire time: before a cron/interval run goes out, its job's next run is written.

The next occurrence is written only if the job is still ACTIVE, unchanged since it was read, and still points
at this run (`next_run_id`), all in one LWT on the job row; so a paused, edited or deleted job chains
nothing, a run fired twice chains once, and the outcome of the run never matters.
"""

from __future__ import annotations

import enum
import logging
import uuid
from datetime import UTC, datetime

from schemas.messages import DueRun
from tickwheel.core.schedule import next_fire
from tickwheel.model import recurs, schedule_of
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import Job, JobState, get_job, run_of
from tickwheel.store.runs import NewRun, create_run, new_run_rows

log = logging.getLogger(__name__)

ADVANCE_JOB = (
    "UPDATE jobs SET next_run_id = ?, next_run_at = ?, fired_count = ?, updated_at = ? WHERE job_id = ?"
    " IF version = ? AND state = 'ACTIVE' AND next_run_id = ?"
)


class ChainResult(enum.StrEnum):
    CHAINED = "chained"
    """The next run is written and the job points at it."""
    EXHAUSTED = "exhausted"
    """The schedule has no further fire (end reached, max runs): the job points at no run."""
    STALE = "stale"
    """The job changed (paused, edited, deleted, already chained past this run): nothing written."""
    NOT_RECURRING = "not_recurring"
    """A once job, a retry or a lease check: nothing to chain."""


def is_recurring(job: Job) -> bool:
    return recurs(job.definition)


def next_run_of(job: Job, after: datetime, fired_count: int) -> NewRun | None:
    """The job's run following the occurrence `after` (None when the schedule is exhausted)."""
    at = next_fire(schedule_of(job.definition), after, fired_count=fired_count)
    if at is None:
        return None
    return run_of(job, at)


async def chain(store: CassandraStore, due: DueRun, now: datetime) -> tuple[ChainResult, NewRun | None]:
    """Write the next run of the job `due` belongs to, if `due` is its current first attempt."""
    if due.kind != "run" or due.attempt != 0:
        return ChainResult.NOT_RECURRING, None
    job = await get_job(store, due.job_id)
    if job is None:
        return ChainResult.STALE, None
    if not is_recurring(job):
        return ChainResult.NOT_RECURRING, None
    # Not `job.version == due.job_version`: an edit that keeps the occurrence moves the run to the new version
    # (runs.retarget) while the wheel still holds the old message. The LWT below requires the job to still point
    # at this run, which a pause, a delete or a rescheduling edit has changed.
    if job.state != JobState.ACTIVE:
        return ChainResult.STALE, None
    scheduled_at = datetime.fromtimestamp(due.scheduled_at_ms / 1000, UTC)
    return await advance_job(store, job, due.run_id, scheduled_at, job.fired_count + 1, now)


async def advance_job(
    store: CassandraStore, job: Job, current_run_id: uuid.UUID, after: datetime, fired_count: int, now: datetime
) -> tuple[ChainResult, NewRun | None]:
    """Point the job from `current_run_id` to its next run after `after` (LWT), then write that run."""
    following = next_run_of(job, after, fired_count)
    next_id = following.run_id if following else None
    next_at = _naive(following.scheduled_at) if following else None
    applied, current = await store.applied(
        ADVANCE_JOB, [next_id, next_at, fired_count, _naive(now), job.job_id, job.version, current_run_id]
    )
    if not applied:
        # A re-fire after the job already moved to our successor: make sure that run exists (idempotent), in
        # case the first firing died between the job update and the run write.
        already = (
            following is not None and current.get("next_run_id") == next_id and current.get("version") == job.version
        )
        if not already or following is None:
            return ChainResult.STALE, None
    if following is None:
        return ChainResult.EXHAUSTED, None
    if applied:  # this fire moved the pointer, so nobody wrote the successor yet: its rows need no condition
        await store.batch(new_run_rows(following, now), logged=False)
    else:  # a re-fire completing an earlier chain: the run may exist and have started since
        await create_run(store, following, now)
    return ChainResult.CHAINED, following


def _naive(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(tzinfo=None)
