"""The reconciler: per ACTIVE recurring job, the occurrences its schedule promised in a window against the runs
recorded for them; what is missing is written again within the job's catch-up policy, and everything else is a
`missed` fire, counted per reason, logged, and handed to `on_missed` (the run-event notifications).

The window of a job is (the later of: when the job reached its current version, now - lookback; the earlier of:
now - grace, just before its next run]: an occurrence before the job's current version belonged to another
schedule (or to a pause), one within `grace` of now may still be on its way (the chain writes each next run
when the previous one fires), and the next run itself is the sweeper's. When the
audit log no longer holds the version's start, the lookback alone bounds the window. The decision is pure
(`tickwheel.core.reconcile`); this module reads, repairs and counts.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from tickwheel import metrics
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.reconcile import Finding, Verdict, promised, reconcile
from tickwheel.model import catch_up_of, schedule_of
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.chain import is_recurring
from tickwheel.store.jobs import Job, JobState, run_of
from tickwheel.store.ports import ReconcilerStore

log = logging.getLogger(__name__)

ONE_MS = timedelta(milliseconds=1)

OnMissed = Callable[[Job, Finding], Awaitable[None]]


class Reconciler:
    """One pass over the jobs table compares, repairs and counts; `on_missed` hears of each unrepaired miss."""

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

    async def reconcile(self, now: datetime) -> dict[Verdict, int]:
        """One paged pass; returns how many occurrences got each verdict."""
        counts: dict[Verdict, int] = {}
        self._reported = {key: until for key, until in self._reported.items() if until > now}
        cursor: str | None = None
        while True:
            page_size = self.settings.coordinator.sweep_page_size
            jobs, cursor = await self.store.scan_jobs(page_size=page_size, cursor=cursor)
            for job in jobs:
                if job.state is not JobState.ACTIVE:
                    continue
                for finding in await self.check(job, now):
                    counts[finding.verdict] = counts.get(finding.verdict, 0) + 1
            if cursor is None:
                return counts

    async def window(self, job: Job, now: datetime) -> tuple[datetime, datetime]:
        """(after, until] of the occurrences this job is held to now: never its next run or later (those are
        not due yet, or the sweeper's)."""
        started = await self.store.version_started_at(job.job_id, job.version)
        after = now - self.lookback if started is None else max(started, now - self.lookback)
        until = now - self.grace
        if job.next_run_at is not None:
            until = min(until, job.next_run_at - ONE_MS)
        return after, until

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
            run = run_of(job, finding.at, fire_at=now)
            await self.store.create_run(run, now)
            await self.near.announce_if_near(due_run_for(run), now)
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
