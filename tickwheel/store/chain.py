"""Chaining recurring jobs at fire time: before a cron/interval run goes out, its job's next run is written.

The next occurrence is written only if the job is still ACTIVE, unchanged since it was read, and still points
at this run (`next_run_id`), all in one LWT on the job row; so a paused, edited or deleted job chains
nothing, a run fired twice chains once, and the outcome of the run never matters.

The same step applies the job's catch-up and overlap policies (`tickwheel.core.missed`): a missed occurrence
the catch-up policy does not run is cancelled and the job moves past it; an occurrence whose job still has an
earlier run in flight is skipped (cancelled) or buffered (its row written again a few seconds later).
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from schemas.messages import DueRun
from tickwheel.core.ids import is_schedule_run
from tickwheel.core.instants import from_epoch_ms
from tickwheel.core.missed import MISSED_AFTER_S, Overlap, overlap_verdict, plan_occurrence
from tickwheel.core.policies import OverlapPolicy
from tickwheel.core.schedule import next_fire
from tickwheel.model import catch_up_of, overlap_of, recurs, schedule_of
from tickwheel.store.buckets import run_of_due
from tickwheel.store.jobs import run_of
from tickwheel.store.ports import ChainStore
from tickwheel.store.records import Job, JobState, NewRun

log = logging.getLogger(__name__)

OVERLAP_RECHECK_S = 5.0
"""How soon a buffered occurrence looks again whether the earlier run has finished."""


class ChainResult(enum.StrEnum):
    """What chaining did with a fired run's job (the label of `metrics.chained`)."""

    CHAINED = "chained"
    """The next run is written and the job points at it."""
    EXHAUSTED = "exhausted"
    """The schedule has no further fire (end reached, max runs): the job points at no run."""
    STALE = "stale"
    """The job changed (paused, edited, deleted, already chained past this run): nothing written."""
    NOT_RECURRING = "not_recurring"
    """A once job, a retry or a lease check: nothing to chain."""
    MISSED = "missed"
    """A missed occurrence the job's catch-up policy does not run: cancelled, the job moved past it."""
    OVERLAP_SKIPPED = "overlap_skipped"
    """An earlier run of the job is in flight and its overlap policy skips: cancelled."""
    BUFFERED = "buffered"
    """An earlier run of the job is in flight and its overlap policy waits: written again a little later."""


@dataclass(frozen=True, slots=True)
class Step:
    """What chaining decided for a fired first attempt."""

    result: ChainResult
    following: NewRun | None = None
    """The job's next run, written (it may be due already: a missed occurrence that still runs)."""
    send: bool = True
    """Whether the fired run goes out now."""
    later: NewRun | None = None
    """The fired run itself, due again at its `fire_at` (buffered by the overlap policy)."""


def is_recurring(job: Job) -> bool:
    """Whether the job's schedule has occurrences after a fire (cron, interval): firing must chain its next run."""
    return recurs(job.definition)


def next_run_of(job: Job, after: datetime, fired_count: int, retention_s: int) -> NewRun | None:
    """The job's run following the occurrence `after` (None when the schedule is exhausted), kept `retention_s`."""
    at = next_fire(schedule_of(job.definition), after, fired_count=fired_count)
    if at is None:
        return None
    return run_of(job, at, retention_s=retention_s)


async def chain(
    store: ChainStore,
    due: DueRun,
    now: datetime,
    *,
    retention_s: int,
    missed_after_s: float = MISSED_AFTER_S,
    recheck_s: float = OVERLAP_RECHECK_S,
) -> Step:
    """Write the next run of the job `due` belongs to, if `due` is its current first attempt, applying the job's
    catch-up policy (an occurrence more than `missed_after_s` late is missed) and its overlap policy. Every run
    row written is kept `retention_s` (the tenant's run retention) past its due time."""
    if due.kind != "run" or due.attempt != 0:
        return Step(ChainResult.NOT_RECURRING)
    if not is_schedule_run(due.run_id, due.job_id, due.scheduled_at_ms):
        return Step(ChainResult.NOT_RECURRING)  # a triggered or backfilled run: no job read, nothing to chain
    job = await store.get_job(due.job_id)
    if job is None:
        return Step(ChainResult.STALE)
    if not is_recurring(job):
        return Step(ChainResult.NOT_RECURRING)
    # Not `job.version == due.job_version`: an edit that keeps the occurrence moves the run to the new version
    # (runs.retarget) while the wheel still holds the old message. The LWT below requires the job to still point
    # at this run, which a pause, a delete or a rescheduling edit has changed.
    if job.state != JobState.ACTIVE:
        return Step(ChainResult.STALE)
    scheduled_at = from_epoch_ms(due.scheduled_at_ms)
    if job.next_run_id != due.run_id:  # a re-fire, or a buffered occurrence looking again
        result, following = await advance_job(
            store, job, due.run_id, scheduled_at, job.fired_count + 1, now, retention_s=retention_s
        )
        return await _overlap(store, job, due, now, Step(result, following), recheck_s, retention_s)
    late_after_s = missed_after_s + due.tolerance_ms / 1000
    plan = plan_occurrence(
        schedule_of(job.definition), scheduled_at, now, catch_up_of(job.definition),
        fired_count=job.fired_count, late_after_s=late_after_s,
    )  # fmt: skip
    following = run_of(job, plan.next_at, retention_s=retention_s) if plan.next_at is not None else None
    result = await point_job(store, job, due.run_id, following, job.fired_count + int(plan.fire), now)
    written = following if result is ChainResult.CHAINED else None
    if not plan.fire and result is not ChainResult.STALE:
        await store.cancel(replace(run_of_due(due), retention_s=retention_s), now)
        return Step(ChainResult.MISSED, written, send=False)
    return await _overlap(store, job, due, now, Step(result, written), recheck_s, retention_s)


async def _overlap(
    store: ChainStore, job: Job, due: DueRun, now: datetime, step: Step, recheck_s: float, retention_s: int
) -> Step:
    policy = overlap_of(job.definition)
    if policy is OverlapPolicy.ALLOW:
        return step
    scheduled_at = from_epoch_ms(due.scheduled_at_ms)
    verdict = overlap_verdict(policy, await store.earlier_in_flight(job.job_id, scheduled_at))
    if verdict is Overlap.START:
        return step
    run = replace(run_of_due(due), retention_s=retention_s)
    if verdict is Overlap.SKIP:
        await store.cancel(run, now)
        return replace(step, result=ChainResult.OVERLAP_SKIPPED, send=False)
    later = now + timedelta(seconds=recheck_s)
    await store.defer(run, 0, later, "overlap: an earlier run is in flight", now)
    return replace(step, result=ChainResult.BUFFERED, send=False, later=replace(run, fire_at=later))


async def advance_job(
    store: ChainStore,
    job: Job,
    current_run_id: uuid.UUID,
    after: datetime,
    fired_count: int,
    now: datetime,
    *,
    retention_s: int,
) -> tuple[ChainResult, NewRun | None]:
    """Point the job from `current_run_id` to its next run after `after` (LWT), then write that run (kept
    `retention_s`)."""
    following = next_run_of(job, after, fired_count, retention_s)
    result = await point_job(store, job, current_run_id, following, fired_count, now)
    return result, following if result is ChainResult.CHAINED else None


async def point_job(
    store: ChainStore,
    job: Job,
    current_run_id: uuid.UUID,
    following: NewRun | None,
    fired_count: int,
    now: datetime,
) -> ChainResult:
    """Point the job from `current_run_id` to `following` (LWT), then write that run."""
    pointer = await store.move_pointer(job, current_run_id, following, fired_count, now)
    if not pointer.applied:
        # A re-fire after the job already moved to our successor: make sure that run exists (idempotent), in
        # case the first firing died between the job update and the run write.
        already = following is not None and pointer.next_run_id == following.run_id and pointer.version == job.version
        if not already or following is None:
            return ChainResult.STALE
    if following is None:
        return ChainResult.EXHAUSTED
    if pointer.applied:  # this fire moved the pointer, so nobody wrote the successor yet: no condition needed
        await store.write_new_run(following, now)
    else:  # a re-fire completing an earlier chain: the run may exist and have started since
        await store.create_run(following, now)
    return ChainResult.CHAINED
