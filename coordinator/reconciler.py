"""The reconciler: per ACTIVE recurring job, the occurrences its schedule promised in a window against the runs
recorded for them; what is missing is written again within the job's catch-up policy, and everything else is a
`missed` fire, counted per reason, logged, and handed to `on_missed` (the run-event notifications).

The window of a job is (the latest of: when the job reached its current version, when it was created, now -
lookback; the earlier of: now - grace, just before its next run]: an occurrence before the job's current
version belonged to another schedule (or to a pause), one within `grace` of now may still be on its way (the
chain writes each next run when the previous one fires), and the next run itself is the sweeper's. When the
audit log no longer holds the version's start, the creation and the lookback bound the window. The decision is
pure (`tickwheel.core.reconcile`); this module reads, repairs and counts.

A pass reads the recurring jobs' index (`jobs_recurring`, the sweeper's; `sweeping.PARTS` partitions), not the
jobs table: a once job has no window to compare, so the jobs kept settled (issue 14) cost a pass nothing. It
reads at most `reconcile_pages_per_pass` pages of `sweep_page_size` ids (partition by partition, and the jobs
they name by `job_id IN ?` groups), and the next pass resumes after them, so a pass is bounded however many
recurring jobs there are; a full cycle over R recurring jobs takes about R / (pages x page size) passes (an empty
partition costs a page too), which must stay inside the lookback for every miss to be seen (defaults: 10,000
recurring jobs a pass every 10 minutes). Each ACTIVE job visited costs one read of its run history over its
window, plus one of the audit log the first time its version is seen (cached per job and version). The index
holds every recurring job once the sweeper's first pass on the keyspace has put the jobs made before it there
(later ones get their row before the write that makes them recurring); it may still name a job that no longer
recurs or was deleted, until the sweeper drops it: `check` skips those.

A miss is told to the job's notification route as a `missed` run event: the coordinator produces a DueRun of
kind `missed` onto the job's lane (`missed_message`), and the worker that consumes it hands it to its Notifier
(the notification path with its signing, egress guard and retries lives in the worker).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import msgspec

from schemas.messages import DueRun
from tickwheel import metrics
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.reconcile import Finding, Verdict, promised, reconcile
from tickwheel.model import catch_up_of, schedule_of
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.chain import is_recurring
from tickwheel.store.jobs import Job, JobState, run_of
from tickwheel.store.ports import ReconcilerStore
from tickwheel.store.sweeping import PARTS
from tickwheel.tenancy import TenantCache

log = logging.getLogger(__name__)

ONE_MS = timedelta(milliseconds=1)
VERSIONS_CACHED = 100_000  # (job, version) -> when that version began; cleared whole when it grows past this

OnMissed = Callable[[Job, Finding], Awaitable[None]]


class Reconciler:
    """One pass over the recurring jobs' index compares, repairs and counts; `on_missed` hears of each unrepaired
    miss."""

    def __init__(
        self, settings: Settings, store: ReconcilerStore, near: NearAnnouncer, on_missed: OnMissed | None = None
    ):
        self.settings = settings
        self.store = store
        self.near = near
        self.on_missed = on_missed
        self.lookback = timedelta(seconds=settings.coordinator.reconcile_lookback_s)
        self.grace = timedelta(seconds=settings.coordinator.sweep_grace_s)
        # Misses already reported (job, occurrence) -> when they leave every window: each is counted and sent
        # once per active coordinator (a new leader reports what is still inside its lookback once more).
        self._reported: dict[tuple[uuid.UUID, datetime], datetime] = {}
        # where the next pass resumes: a partition of the index and a cursor in it (None: at its start)
        self._part = 0
        self._cursor: str | None = None
        self._version_started: dict[tuple[uuid.UUID, int], datetime | None] = {}
        self.tenants = TenantCache(store)

    async def reconcile(self, now: datetime) -> dict[Verdict, int]:
        """One pass over the next `reconcile_pages_per_pass` pages of the recurring jobs' index (from where the last
        pass stopped); returns how many occurrences got each verdict."""
        counts: dict[Verdict, int] = {}
        self._reported = {key: until for key, until in self._reported.items() if until > now}
        cfg = self.settings.coordinator
        for _ in range(cfg.reconcile_pages_per_pass):
            ids, self._cursor = await self.store.recurring_page(
                self._part, page_size=cfg.sweep_page_size, cursor=self._cursor
            )
            jobs = await self.store.get_jobs(ids) if ids else {}
            for job in jobs.values():
                if job.state is not JobState.ACTIVE:
                    continue
                for finding in await self.check(job, now):
                    counts[finding.verdict] = counts.get(finding.verdict, 0) + 1
            if self._cursor is None:
                self._part = (self._part + 1) % PARTS
                if self._part == 0:  # the cycle is complete; the next pass starts again at the beginning
                    break
        return counts

    async def window(self, job: Job, now: datetime) -> tuple[datetime, datetime]:
        """(after, until] of the occurrences this job is held to now: never its next run or later (those are
        not due yet, or the sweeper's)."""
        started = await self.version_started(job)
        after = now - self.lookback if started is None else max(started, now - self.lookback)
        if job.created_at is not None:  # nothing was promised before the job existed (a job with no audit row)
            after = max(after, job.created_at)
        until = now - self.grace
        if job.next_run_at is not None:
            until = min(until, job.next_run_at - ONE_MS)
        return after, until

    async def version_started(self, job: Job) -> datetime | None:
        """When the job reached its current version (audit log), read once per job and version."""
        key = (job.job_id, job.version)
        if key not in self._version_started:
            if len(self._version_started) >= VERSIONS_CACHED:
                self._version_started.clear()
            self._version_started[key] = await self.store.version_started_at(job.job_id, job.version)
        return self._version_started[key]

    async def check(self, job: Job, now: datetime) -> list[Finding]:
        """Compare one job's window, repair what the catch-up policy allows, count and report the rest."""
        if not is_recurring(job) or job.next_run_at is None:  # a once job, or a schedule that has ended
            return []
        after, until = await self.window(job, now)
        if until <= after:
            return []
        promises = promised(schedule_of(job.definition), after, until)
        if not promises:
            return []
        recorded = await self.store.scheduled_between(job.job_id, after, until)
        rule = catch_up_of(job.definition)
        findings = reconcile(promises, recorded, now, rule.policy, rule.max_count, rule.max_age_s)
        fresh = [f for f in findings if (job.job_id, f.at) not in self._reported]
        for finding in fresh:
            await self.act(job, finding, now)
        return fresh

    async def act(self, job: Job, finding: Finding, now: datetime) -> None:
        extra = {"tenant": job.tenant_id, "job_id": str(job.job_id)}
        metrics.reconciler_findings.labels(finding.verdict.value).inc()
        if finding.verdict is Verdict.REPAIRED:
            retention_s = await self.tenants.run_retention_s(job.tenant_id, self.settings.retention.runs_days)
            run = run_of(job, finding.at, fire_at=now, retention_s=retention_s)
            await self.store.create_run(run, now)
            self.near.announce_if_near(due_run_for(run), now)
            log.warning(
                "reconciler wrote the missing run of %s due %s", job.job_id, finding.at.isoformat(), extra=extra
            )
            return
        self._reported[(job.job_id, finding.at)] = finding.at + self.lookback
        log.warning(
            "reconciler found a missed fire of %s due %s (%s)", job.job_id, finding.at.isoformat(),
            finding.verdict.value, extra=extra,
        )  # fmt: skip
        if self.on_missed is not None:
            await self.on_missed(job, finding)


def missed_message(job: Job, finding: Finding, now: datetime) -> DueRun:
    """The lane message that tells the job's notification route of an unrepaired miss: a DueRun of kind
    `missed` for the occurrence's run id, with the reason."""
    due = due_run_for(run_of(job, finding.at, fire_at=now, retention_s=RUN_RETENTION_S), kind="missed")  # no row
    return msgspec.structs.replace(due, missed_reason=finding.verdict.value)
