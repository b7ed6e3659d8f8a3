"""The sweeper: finds ACTIVE jobs whose next run is missing, or overdue and never fired, and runs stranded
RUNNING past their lease or RETRY past their retry time with no row left to fire them, and repairs them.

A pass reads what can still need a repair, not every job kept (issue 14; docs/architecture.md "Sweeper"):
- the recurring jobs' index (`jobs_recurring`): each recurring job's pointer, since a missing next run has no due
  row to be found by;
- the due rows (`runs_by_bucket`) of each minute once it is `sweep_grace_s` old, once per minute (`sweep_marks`
  holds how far): every run still waiting, running or retrying has a row at the time its next step is due (the
  rows that find a run again are written before its conditional writes), so the runs those rows name, read in
  `IN ?` groups, are the only ones that can be overdue or stranded. A settled once job is read in its run's minute
  and never again.

Every repair is counted (metrics.sweeper_repairs) and logged at WARNING with the job id: a silent miss must not
stay silent. The decisions are pure (`diagnose`, `diagnose_stranded`); `Sweeper` reads, repairs and announces.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwheel import metrics
from tickwheel.bus.near import NearAnnouncer
from tickwheel.bus.ports import Publisher
from tickwheel.core.horizon import minutes_to_sweep
from tickwheel.core.ids import minute_bucket
from tickwheel.core.missed import Plan, plan_occurrence
from tickwheel.model import catch_up_of, schedule_of
from tickwheel.settings import Settings
from tickwheel.store.buckets import MINUTE, due_run_for
from tickwheel.store.chain import ChainResult, is_recurring, point_job
from tickwheel.store.jobs import Job, JobState, run_of
from tickwheel.store.ports import SweeperStore
from tickwheel.store.records import DueState
from tickwheel.store.runs import (
    NewRun,
    RunKind,
    RunStatus,
)
from tickwheel.store.sweeping import PARTS
from tickwheel.tenancy import TenantCache

log = logging.getLogger(__name__)

MARK = "sweeper"
"""The name of the sweeper's row in `sweep_marks`."""
SHARD_GROUP = 64
"""Shards one `shard IN ?` read of a minute's due rows asks for."""


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


def keeps_its_index_row(job: Job) -> bool:
    """Whether a job in the recurring jobs' index can still need its pointer checked: one that is deleted, no
    longer recurs or has no next run cannot (an edit that gives it one writes its row again first)."""
    return job.state is not JobState.DELETED and is_recurring(job) and job.next_run_id is not None


def groups(shards: int) -> list[range]:
    """The shards 0 .. shards - 1 in groups of SHARD_GROUP."""
    return [range(start, min(start + SHARD_GROUP, shards)) for start in range(0, shards, SHARD_GROUP)]


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
        """One pass: the recurring jobs' pointers, then the due rows of the minutes past their grace since the
        last pass; returns the repairs made."""
        done: dict[Repair, int] = {}
        cfg = self.settings.coordinator
        mark = await self.store.swept_through(MARK)
        if mark is None:  # this keyspace's first pass: jobs made before the index was there are put in it
            await self.index_every_job(now, done)
        for part in range(PARTS):
            await self.sweep_recurring(part, now, done)
        minutes = minutes_to_sweep(
            mark, now, self.grace, timedelta(seconds=cfg.sweep_lookback_s), cfg.sweep_minutes_per_pass
        )
        seen: set[uuid.UUID] = set()  # a run with rows in several of these minutes is checked once a pass
        for minute in minutes:
            await self.sweep_minute(minute, now, done, seen)
        if minutes or mark is None:  # a first pass marks even with nothing to read, so the next is not a first
            await self.store.mark_swept(MARK, minutes[-1] + MINUTE if minutes else minute_bucket(now - self.grace))
        await self.store.add_sweep({repair.value: n for repair, n in done.items()})
        return done

    async def index_every_job(self, now: datetime, done: dict[Repair, int]) -> None:
        """The whole jobs table, once: each recurring job into the index, each once job's pointer checked (the
        due rows of runs older than the lookback are not read)."""
        cursor: str | None = None
        while True:
            jobs, cursor = await self.store.scan_jobs(
                page_size=self.settings.coordinator.sweep_page_size, cursor=cursor
            )
            recurring = [job for job in jobs if keeps_its_index_row(job)]
            if recurring:  # a page's rows together, not one round trip each (a page of 500 took 500 in turn)
                await self.store.mark_all_recurring(recurring)
            await self.check_pointers([j for j in jobs if not is_recurring(j)], now, done)
            if cursor is None:
                return

    async def sweep_recurring(self, part: int, now: datetime, done: dict[Repair, int]) -> None:
        """Check the pointer of each recurring job in partition `part` of the index; drop the jobs that cannot
        need it."""
        ids = await self.store.recurring_jobs(part)
        page_size = self.settings.coordinator.sweep_page_size
        for start in range(0, len(ids), page_size):
            jobs = await self.store.get_jobs(ids[start : start + page_size])
            for job in jobs.values():
                if not keeps_its_index_row(job):
                    await self.store.forget_recurring(job)
            await self.check_pointers([job for job in jobs.values() if keeps_its_index_row(job)], now, done)

    async def check_pointers(self, jobs: Sequence[Job], now: datetime, done: dict[Repair, int]) -> None:
        """`check` for each of `jobs`, their next runs read together."""
        next_runs = [job.next_run_id for job in jobs if job.state is JobState.ACTIVE and job.next_run_id is not None]
        states = await self.store.due_states(next_runs) if next_runs else {}
        for job in jobs:
            _count(done, await self.check(job, now, states))

    async def sweep_minute(
        self, minute: datetime, now: datetime, done: dict[Repair, int], seen: set[uuid.UUID]
    ) -> None:
        """Check the runs the due rows of `minute` name, every shard's (those not in `seen`, which gets them)."""
        named: dict[uuid.UUID, uuid.UUID] = {}
        for shards in groups(self.settings.shards):
            for row in await self.store.read_keys(shards, minute, minute + MINUTE):
                if row.run_id not in seen:
                    named[row.run_id] = row.job_id
        seen.update(named)
        for repair in await self.check_runs(named, now):
            _count(done, repair)

    async def check_runs(self, named: Mapping[uuid.UUID, uuid.UUID], now: datetime) -> list[Repair]:
        """Repair the runs `named` (run id -> job id) that are stranded, or overdue as their job's next run; the
        runs are read in `IN ?` groups, and a job only for a run overdue."""
        states = await self.store.due_states(list(named)) if named else {}
        repairs: list[Repair] = []
        overdue: list[uuid.UUID] = []
        for run_id, state in states.items():
            if state.status in (RunStatus.RUNNING, RunStatus.RETRY):
                repair = await self.check_stranded(run_id, state, now)
                if repair is not None:
                    repairs.append(repair)
            elif state.status is RunStatus.SCHEDULED and state.attempt == 0 and _before(state.due_at, now - self.grace):
                overdue.append(run_id)
        jobs = await self.store.get_jobs(sorted({named[run_id] for run_id in overdue})) if overdue else {}
        for run_id in overdue:
            job = jobs.get(named[run_id])
            if job is not None and job.next_run_id == run_id:  # another run of the job is not the sweeper's
                repair = await self.check(job, now, states)
                if repair is not None:
                    repairs.append(repair)
        return repairs

    async def check(self, job: Job, now: datetime, states: Mapping[uuid.UUID, DueState] | None = None) -> Repair | None:
        """Repair the job's next run if it is missing, or overdue and never fired (`states`: read beforehand)."""
        if job.state is not JobState.ACTIVE or job.next_run_id is None:
            return None
        next_run_at = job.next_run_at
        if states is None:
            states = await self.store.due_states([job.next_run_id])
        state = states.get(job.next_run_id)
        run = None if state is None else _view(state)
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

    async def check_stranded(self, run_id: uuid.UUID, state: DueState, now: datetime) -> Repair | None:
        """Repair a run that started (or failed) and has nothing left to fire it; the run row is read only then
        (for the identity the repair's rows carry)."""
        held = HeldRun(state.status, state.attempt, state.due_at, state.lease_until)
        repair = diagnose_stranded(held, now, self.grace)
        if repair is None:
            return None
        run = await self.store.get_run(run_id)
        if run is None:
            return None
        await self._refire_stranded(repair, run.identity(await self._retention_s(run.tenant_id)), held, now)
        metrics.sweeper_repairs.labels(reason=repair.value).inc()
        log.warning(
            "sweeper repaired run %s: %s (attempt %s, status %s)",
            run_id,
            repair.value,
            held.attempt,
            held.status,
            extra={"tenant": run.tenant_id, "job_id": str(run.job_id), "run_id": str(run_id)},
        )
        return repair

    async def _refire_stranded(self, repair: Repair, run: NewRun, held: HeldRun, now: datetime) -> None:
        """A row at now that the normal path handles: a lease check (the dispatcher sees the lease lapsed, a worker
        times the attempt out) or the retry's run row (with its due time moved to now, written after the row)."""
        kind = RunKind.LEASE_CHECK if repair is Repair.LEASE_LAPSED else RunKind.RUN
        await self.store.write_due_row(run, now, held.attempt, kind)
        if repair is Repair.RETRY_UNFIRED:
            await self.store.move_due(run, RunStatus.RETRY, held.attempt, now, now)
        self.near.announce_if_near(due_run_for(run, attempt=held.attempt, kind=kind.value, fire_at=now), now)

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
        self._announce(run, now)

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
            self._announce(following, now)

    def _announce(self, run: NewRun, now: datetime) -> None:
        """A repaired run may fall inside a horizon the dispatchers already loaded: announce it."""
        self.near.announce_if_near(due_run_for(run), now)


def _view(state: DueState) -> RunView:
    """What `diagnose` reads of a run."""
    return RunView(state.status, state.attempt, state.due_at)


def _before(at: datetime | None, limit: datetime) -> bool:
    """Whether `at` is set and earlier than `limit`."""
    return at is not None and at < limit


def _count(done: dict[Repair, int], repair: Repair | None) -> None:
    """Add a repair (if any) to a pass's counts."""
    if repair is not None:
        done[repair] = done.get(repair, 0) + 1
