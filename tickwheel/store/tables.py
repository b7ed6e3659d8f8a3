"""The store's ports (`tickwheel.store.ports`) over Cassandra: each method is the function of its table module,
bound to one session. The statements and their order stay in those modules; this class only binds them."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime

from schemas.messages import DueRun
from tickwheel.store import audit, buckets, checkpoints, dead_letters, far, jobs, operator, run_history, runs, tenants
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import (
    Attempt,
    AttemptResult,
    Checkpoint,
    DeadLetter,
    DueState,
    HistoryEntry,
    Job,
    JobHead,
    NewRun,
    Pointer,
    Run,
    RunKind,
    RunStatus,
    Tenant,
    Transition,
)


class CassandraTables:
    """Every store port over one Cassandra session (`cql`, for what the ports do not cover yet)."""

    def __init__(self, cql: CassandraStore):
        self.cql = cql

    # -- RunStore -----------------------------------------------------------------------------------------------
    async def get_run(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None when it has no row."""
        return await runs.get_run(self.cql, run_id)

    async def get_attempts(self, run_id: uuid.UUID) -> list[Attempt]:
        """Every attempt of the run, in order."""
        return await runs.get_attempts(self.cql, run_id)

    async def create_run(self, run: NewRun, now: datetime) -> bool:
        """`runs.create_run`."""
        return await runs.create_run(self.cql, run, now)

    async def write_new_run(self, run: NewRun, now: datetime) -> None:
        """`runs.write_new_run`."""
        await runs.write_new_run(self.cql, run, now)

    async def claim(
        self, run: NewRun, expected_attempt: int, worker: str, lease_until: datetime, now: datetime
    ) -> Transition:
        """`runs.claim`."""
        return await runs.claim(self.cql, run, expected_attempt, worker, lease_until, now)

    async def finish(
        self,
        run: NewRun,
        attempt: int,
        result: AttemptResult,
        worker: str,
        started_at: datetime,
        now: datetime,
        lease_until: datetime | None = None,
    ) -> bool:
        """`runs.finish`."""
        return await runs.finish(self.cql, run, attempt, result, worker, started_at, now, lease_until)

    async def expire_lease(self, run: NewRun, attempt: int, retry_at: datetime | None, now: datetime) -> bool:
        """`runs.expire_lease`."""
        return await runs.expire_lease(self.cql, run, attempt, retry_at, now)

    async def lease_lapsed(self, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
        """`runs.lease_lapsed`."""
        return await runs.lease_lapsed(self.cql, run_id, attempt, now)

    async def hold_lease(
        self, run: NewRun, attempt: int, claimed_until: datetime, lease_until: datetime, now: datetime
    ) -> Transition:
        """`runs.hold_lease`."""
        return await runs.hold_lease(self.cql, run, attempt, claimed_until, lease_until, now)

    async def report_completion(self, run: NewRun, attempt: int, report: str, now: datetime) -> Transition:
        """`runs.report_completion`."""
        return await runs.report_completion(self.cql, run, attempt, report, now)

    async def defer(self, run: NewRun, attempt: int, until: datetime, reason: str, now: datetime) -> None:
        """`runs.defer`."""
        await runs.defer(self.cql, run, attempt, until, reason, now)

    async def cancel(self, run: NewRun, now: datetime) -> bool:
        """`runs.cancel`."""
        return await runs.cancel(self.cql, run, now)

    # -- JobStore -----------------------------------------------------------------------------------------------
    async def get_job(self, job_id: uuid.UUID) -> Job | None:
        """`jobs.get_job`."""
        return await jobs.get_job(self.cql, job_id)

    async def read_state(self, job_id: uuid.UUID) -> JobHead | None:
        """`jobs.read_state`."""
        return await jobs.read_state(self.cql, job_id)

    async def create_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """`jobs.create_job`."""
        await jobs.create_job(self.cql, job, first_run, now)

    async def move_pointer(
        self, job: Job, current_run_id: uuid.UUID, following: NewRun | None, fired_count: int, now: datetime
    ) -> Pointer:
        """`jobs.move_pointer`."""
        return await jobs.move_pointer(self.cql, job, current_run_id, following, fired_count, now)

    async def earlier_in_flight(self, job_id: uuid.UUID, before: datetime) -> int:
        """`run_history.earlier_in_flight`."""
        return await run_history.earlier_in_flight(self.cql, job_id, before)

    # -- ReconcilerStore ------------------------------------------------------------------------------------------
    async def version_started_at(self, job_id: uuid.UUID, version: int) -> datetime | None:
        """`audit.version_started_at`."""
        return await audit.version_started_at(self.cql, job_id, version)

    async def scheduled_between(self, job_id: uuid.UUID, after: datetime, until: datetime) -> list[datetime]:
        """`run_history.scheduled_between`."""
        return await run_history.scheduled_between(self.cql, job_id, after, until)

    # -- CoordinatorStore -----------------------------------------------------------------------------------------
    async def highest_epoch(self) -> int:
        """`checkpoints.highest_epoch`."""
        return await checkpoints.highest_epoch(self.cql)

    async def due_per_minute(self, start: datetime, minutes: int, shards: int) -> list[int]:
        """`operator.due_per_minute`."""
        return await operator.due_per_minute(self.cql, start, minutes, shards)

    # -- HistoryStore, FarStore ---------------------------------------------------------------------------------
    async def previous_status(self, job_id: uuid.UUID, before: datetime) -> str | None:
        """`run_history.previous_status`."""
        return await run_history.previous_status(self.cql, job_id, before)

    async def read_far_day(self, day: datetime, shard: int) -> list[NewRun]:
        """`far.read_day`."""
        return await far.read_day(self.cql, day, shard)

    async def move_far_run(self, run: NewRun, now: datetime) -> bool:
        """`far.move_run`."""
        return await far.move_run(self, run, now)

    async def delete_far_day(self, day: datetime, shard: int) -> None:
        """`far.delete_day`."""
        await far.delete_day(self.cql, day, shard)

    # -- SweeperStore -------------------------------------------------------------------------------------------
    async def scan_jobs(self, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
        """`jobs.scan_page`."""
        return await jobs.scan_page(self.cql, page_size=page_size, cursor=cursor)

    async def latest_before(self, job_id: uuid.UUID, before: datetime, limit: int) -> list[HistoryEntry]:
        """`run_history.latest_before`."""
        return await run_history.latest_before(self.cql, job_id, before, limit)

    async def due_state(self, run_id: uuid.UUID) -> DueState | None:
        """`runs.due_state`."""
        return await runs.due_state(self.cql, run_id)

    async def move_due(self, run: NewRun, status: RunStatus, attempt: int, due_at: datetime, now: datetime) -> bool:
        """`runs.move_due`."""
        return await runs.move_due(self.cql, run, status, attempt, due_at, now)

    async def write_due_row(self, run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> None:
        """`runs.write_due_row`."""
        await runs.write_due_row(self.cql, run, fire_at, attempt, kind)

    async def add_sweep(self, repairs: Mapping[str, int]) -> None:
        """`operator.add_sweep`."""
        await operator.add_sweep(self.cql, repairs)

    # -- DueRowStore, CheckpointStore -----------------------------------------------------------------------------
    async def read_range(self, shard: int, since: datetime, until: datetime) -> list[DueRun]:
        """`buckets.read_range`."""
        return await buckets.read_range(self.cql, shard, since, until)

    async def read_checkpoints(self, shards: Iterable[int]) -> dict[int, Checkpoint]:
        """`checkpoints.read`."""
        return await checkpoints.read(self.cql, shards)

    async def advance_checkpoints(
        self, marks: Mapping[int, datetime], epoch: int, owner: str, now: datetime
    ) -> dict[int, bool]:
        """`checkpoints.advance`."""
        return await checkpoints.advance(self.cql, marks, epoch, owner, now)

    # -- TenantStore, DeadLetterStore ---------------------------------------------------------------------------
    async def call_settings(self, tenant_id: str) -> Tenant:
        """`tenants.call_settings`."""
        return await tenants.call_settings(self.cql, tenant_id)

    async def add_dead_letter(self, letter: DeadLetter, ttl_s: int, run_retention_s: int) -> None:
        """`dead_letters.add_dead_letter`."""
        await dead_letters.add_dead_letter(
            self.cql, tenant_id=letter.tenant_id, run_id=letter.run_id, job_id=letter.job_id,
            target_host=letter.target_host, payload=letter.payload, last_error=letter.last_error,
            attempts=letter.attempts, dead_at=letter.dead_at, ttl_s=ttl_s, run_retention_s=run_retention_s,
        )  # fmt: skip
