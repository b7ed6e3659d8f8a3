"""The sweeper: finds ACTIVE jobs whose next run is missing, or overdue and never fired, and runs stranded
RUNNING past their lease or RETRY past their retry time with no row left to fire them, and repairs them.

Every repair is counted (metrics.sweeper_repairs) and logged at WARNING with the job id: a silent miss must not
stay silent. The decision is pure (`diagnose`); `Sweeper` reads, repairs and announces.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwheel import metrics
from tickwheel.bus.near import NearAnnouncer
from tickwheel.bus.ports import Publisher
from tickwheel.core.missed import Plan, plan_occurrence
from tickwheel.model import catch_up_of, schedule_of
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.chain import ChainResult, is_recurring, point_job
from tickwheel.store.jobs import Job, JobState, run_of
from tickwheel.store.ports import SweeperStore
from tickwheel.store.records import DueState, HistoryEntry
from tickwheel.store.runs import (
    NewRun,
    RunKind,
    RunStatus,
)
from tickwheel.tenancy import TenantCache

log = logging.getLogger(__name__)

STRANDED_CHECKED = 3
"""How many of a job's newest history rows (due before the grace) the stranded-run check reads per pass."""

FINAL_STATUSES = frozenset({"SUCCEEDED", "DEAD", "CANCELLED"})


class Repair(enum.StrEnum):
    RECREATE = "missing_run"
    """The next run has no row: write it again at its time."""
    CHAIN_FROM_NOW = "missing_run_stale"
    """The next run has no row and its time passed long ago: move the job to its next fire after now."""
    REFIRE = "overdue"
    """The next run is still SCHEDULED well past its time: put its bucket row at now so it fires."""
    LEASE_LAPSED = "lease_lapsed"
    """A run is RUNNING well past its lease with no outcome: a lease check row at now times it out."""
    RETRY_UNFIRED = "retry_unfired"
    """A run is RETRY well past its retry time and was never claimed again: its run row is written at now."""
    SKIP_MISSED = "overdue_skipped"
    """The next run is overdue (or missing and stale) and the job's catch-up policy does not run it: cancel it
    and move the job to the occurrence the policy picks (a newer missed one, due at once, or the next)."""


@dataclass(frozen=True, slots=True)
class RunView:
    status: str
    attempt: int
    due_at: datetime | None


def diagnose(
    recurring: bool, state: str, next_run_at: datetime | None, run: RunView | None, now: datetime, grace: timedelta
) -> Repair | None:
    """What (if anything) the job's next run needs."""
    if state != "ACTIVE" or next_run_at is None:
        return None
    if run is None:
        if not recurring:
            return None
        return Repair.CHAIN_FROM_NOW if next_run_at < now - grace else Repair.RECREATE
    due = run.due_at or next_run_at
    if run.status == "SCHEDULED" and run.attempt == 0 and due < now - grace:
        return Repair.REFIRE
    return None


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A run that is neither final nor waiting for its first fire: what the stranded-run check reads."""

    status: str
    attempt: int
    due_at: datetime | None
    lease_until: datetime | None


def diagnose_stranded(run: HeldRun, now: datetime, grace: timedelta) -> Repair | None:
    """Whether a started run was left with nothing that will fire it again (its lease check or retry row lost)."""
    if run.status == "RUNNING" and (run.lease_until is None or run.lease_until < now - grace):
        return Repair.LEASE_LAPSED
    if run.status == "RETRY" and run.due_at is not None and run.due_at < now - grace:
        return Repair.RETRY_UNFIRED
    return None


@dataclass(frozen=True, slots=True)
class PageViews:
    """What a pass read of a page of jobs: their next runs' states and their newest history entries."""

    states: Mapping[uuid.UUID, DueState]
    history: Mapping[uuid.UUID, list[HistoryEntry]]

    def run(self, run_id: uuid.UUID) -> RunView | None:
        state = self.states.get(run_id)
        return None if state is None else RunView(state.status, state.attempt, state.due_at)


class Sweeper:
    def __init__(self, settings: Settings, store: SweeperStore, producer: Publisher):
        self.settings = settings
        self.store = store
        self.near = NearAnnouncer(settings, producer)
        self.grace = timedelta(seconds=settings.coordinator.sweep_grace_s)
        self.tenants = TenantCache(store)

    async def _retention_s(self, tenant_id: str) -> int:
        """The tenant's run retention, which every run row a repair writes carries."""
        return await self.tenants.run_retention_s(tenant_id, self.settings.retention.runs_days)

    async def sweep(self, now: datetime) -> dict[Repair, int]:
        """One pass over the jobs table (paged); returns the repairs made."""
        done: dict[Repair, int] = {}
        cursor: str | None = None
        while True:
            page_size = self.settings.coordinator.sweep_page_size
            jobs, cursor = await self.store.scan_jobs(page_size=page_size, cursor=cursor)
            page = await self.read_page(jobs, now)
            for job in jobs:
                checked = await self.check(job, now, page), *await self.check_stranded(job, now, page)
                for repair in checked:
                    if repair is not None:
                        done[repair] = done.get(repair, 0) + 1
            if cursor is None:
                await self.store.add_sweep({repair.value: n for repair, n in done.items()})
                return done

    async def read_page(self, jobs: list[Job], now: datetime) -> PageViews:
        """What `check` and `check_stranded` read of a page of jobs, in a few `IN ?` reads: the next runs' states
        and the newest history entries. Read one job at a time, that was two requests per job and pass, every
        job ever made (a once job's row stays ACTIVE) every `sweep_interval_s`: the coordinator's cost grew with
        the jobs kept, not with the runs made (BENCHMARKS.md "Cost per run, round 6")."""
        next_runs = [job.next_run_id for job in jobs if job.state is JobState.ACTIVE and job.next_run_id is not None]
        states = await self.store.due_states(next_runs) if next_runs else {}
        history = await self.store.latest_before_each([job.job_id for job in jobs], now - self.grace, STRANDED_CHECKED)
        return PageViews(states, history)

    async def check(self, job: Job, now: datetime, page: PageViews | None = None) -> Repair | None:
        """Repair the job's next run if it is missing, or overdue and never fired (`page`: read beforehand)."""
        if job.state is not JobState.ACTIVE or job.next_run_id is None:
            return None
        next_run_at = job.next_run_at
        page = page or await self.read_page([job], now)
        run = page.run(job.next_run_id)
        repair = diagnose(is_recurring(job), job.state, next_run_at, run, now, self.grace)
        if repair is None or next_run_at is None:
            return None
        plan = None
        if repair in (Repair.REFIRE, Repair.CHAIN_FROM_NOW):  # a missed occurrence: the job's catch-up decides
            plan = plan_occurrence(
                schedule_of(job.definition), next_run_at, now, catch_up_of(job.definition),
                fired_count=job.fired_count, late_after_s=self.settings.dispatcher.missed_after_s,
            )  # fmt: skip
            repair = Repair.REFIRE if plan.fire else Repair.SKIP_MISSED
        await self._repair(repair, job, next_run_at, now, plan)
        metrics.sweeper_repairs.labels(reason=repair.value).inc()
        log.warning(
            "sweeper repaired job %s: %s (next run %s due %s)",
            job.job_id,
            repair.value,
            job.next_run_id,
            next_run_at.isoformat(),
            extra={"tenant": job.tenant_id, "job_id": str(job.job_id), "run_id": str(job.next_run_id)},
        )
        return repair

    async def check_stranded(self, job: Job, now: datetime, page: PageViews | None = None) -> list[Repair]:
        """Repair the job's recent runs that started (or failed) and have nothing left to fire them: the newest
        few history rows due before the grace, read through their run rows (the history records outcomes only)."""
        repairs = []
        page = page or await self.read_page([job], now)
        for entry in page.history.get(job.job_id, ()):
            if entry.status in FINAL_STATUSES:
                continue
            run = await self.store.get_run(entry.run_id)
            if run is None:
                continue
            held = HeldRun(run.status, run.attempt, run.due_at, run.lease_until)
            repair = diagnose_stranded(held, now, self.grace)
            if repair is None:
                continue
            await self._refire_stranded(repair, run.identity(await self._retention_s(run.tenant_id)), held, now)
            metrics.sweeper_repairs.labels(reason=repair.value).inc()
            log.warning(
                "sweeper repaired run %s: %s (attempt %s, status %s)",
                entry.run_id,
                repair.value,
                held.attempt,
                held.status,
                extra={"tenant": run.tenant_id, "job_id": str(job.job_id), "run_id": str(entry.run_id)},
            )
            repairs.append(repair)
        return repairs

    async def _refire_stranded(self, repair: Repair, run: NewRun, held: HeldRun, now: datetime) -> None:
        """A row at now that the normal path handles: a lease check (the dispatcher sees the lease lapsed, a worker
        times the attempt out) or the retry's run row (with its due time moved to now, written after the row)."""
        kind = RunKind.LEASE_CHECK if repair is Repair.LEASE_LAPSED else RunKind.RUN
        await self.store.write_due_row(run, now, held.attempt, kind)
        if repair is Repair.RETRY_UNFIRED:
            await self.store.move_due(run, RunStatus.RETRY, held.attempt, now, now)
        await self.near.announce_if_near(due_run_for(run, attempt=held.attempt, kind=kind.value, fire_at=now), now)

    async def _repair(
        self, repair: Repair, job: Job, next_run_at: datetime, now: datetime, plan: Plan | None = None
    ) -> None:
        if repair is Repair.SKIP_MISSED:
            assert plan is not None
            await self._skip_missed(job, next_run_at, plan.next_at, now)
            return
        fire_at = next_run_at if repair is Repair.RECREATE else now
        retention_s = await self._retention_s(job.tenant_id)
        run = run_of(job, next_run_at, fire_at=fire_at, run_id=job.next_run_id, retention_s=retention_s)
        if repair is Repair.REFIRE:  # its due time moves to now, so the next pass does not repair it again
            await self.store.move_due(run, RunStatus.SCHEDULED, 0, fire_at, now)
        await self.store.create_run(run, now)
        await self._announce(run, now)

    async def _skip_missed(self, job: Job, missed_at: datetime, next_at: datetime | None, now: datetime) -> None:
        """Cancel the missed run; point the job at `next_at`, written due no earlier than now (a missed
        occurrence the policy still runs is in a minute the dispatchers have read already)."""
        assert job.next_run_id is not None
        retention_s = await self._retention_s(job.tenant_id)
        await self.store.cancel(run_of(job, missed_at, run_id=job.next_run_id, retention_s=retention_s), now)
        following = None
        if next_at is not None:
            following = run_of(job, next_at, fire_at=max(next_at, now), retention_s=retention_s)
        result = await point_job(self.store, job, job.next_run_id, following, job.fired_count, now)
        if result is ChainResult.CHAINED and following is not None:
            await self._announce(following, now)

    async def _announce(self, run: NewRun, now: datetime) -> None:
        """A repaired run may fall inside a horizon the dispatchers already loaded: announce it."""
        await self.near.announce_if_near(due_run_for(run), now)
