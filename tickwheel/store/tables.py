"""The store's ports (`tickwheel.store.ports`) over Cassandra: each method is the function of its table module,
bound to one session. The statements and their order stay in those modules; this class only binds them."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime

from schemas.messages import DueRun
from tickwheel.store import (
    audit,
    buckets,
    checkpoints,
    dead_letters,
    far,
    idempotency,
    jobs,
    names,
    operator,
    run_history,
    runs,
    sweeping,
    tenants,
)
from tickwheel.store.audit import JobChangeRecord
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.decisions import SharedDecisions
from tickwheel.store.idempotency import Reservation
from tickwheel.store.names import NameClaim
from tickwheel.store.ports import KeptChange
from tickwheel.store.records import (
    Attempt,
    AttemptResult,
    Checkpoint,
    DeadLetter,
    DueKey,
    DueState,
    HistoryEntry,
    Job,
    JobChange,
    JobHead,
    KeyedJob,
    NewRun,
    Pointer,
    Run,
    RunKind,
    RunStatus,
    Tenant,
    Transition,
)
from tickwheel.store.tenants import ApiKey, TenantChange


class CassandraTables(SharedDecisions):
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
        self,
        run: NewRun,
        expected_attempt: int,
        worker: str,
        lease_until: datetime,
        now: datetime,
        *,
        unchanged: bool = False,
    ) -> Transition:
        """`runs.claim`."""
        return await runs.claim(self.cql, run, expected_attempt, worker, lease_until, now, unchanged=unchanged)

    async def finish(
        self,
        run: NewRun,
        attempt: int,
        result: AttemptResult,
        worker: str,
        started_at: datetime,
        now: datetime,
        lease_until: datetime | None = None,
        fired_at: datetime | None = None,
    ) -> bool:
        """`runs.finish`."""
        return await runs.finish(self.cql, run, attempt, result, worker, started_at, now, lease_until, fired_at)

    async def expire_lease(self, run: NewRun, attempt: int, retry_at: datetime | None, now: datetime) -> bool:
        """`runs.expire_lease`."""
        return await runs.expire_lease(self.cql, run, attempt, retry_at, now)

    async def lease_lapsed(self, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
        """`runs.lease_lapsed`."""
        return await runs.lease_lapsed(self.cql, run_id, attempt, now)

    async def extend_lease(
        self, run_id: uuid.UUID, attempt: int, lease_until: datetime, now: datetime, retention_s: int
    ) -> Transition:
        """`runs.extend_lease`."""
        return await runs.extend_lease(self.cql, run_id, attempt, lease_until, now, retention_s)

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

    async def recurring_jobs(self, part: int) -> list[uuid.UUID]:
        """`sweeping.recurring_jobs`."""
        return await sweeping.recurring_jobs(self.cql, part)

    async def forget_recurring(self, job: Job) -> None:
        """`sweeping.forget_recurring`."""
        await sweeping.forget_recurring(self.cql, job)

    async def mark_recurring(self, job: Job) -> None:
        """`sweeping.mark_recurring`."""
        await sweeping.mark_recurring(self.cql, job)

    async def mark_all_recurring(self, jobs: Sequence[Job]) -> None:
        """`sweeping.mark_all_recurring`."""
        await sweeping.mark_all_recurring(self.cql, jobs)

    async def recurring_page(
        self, part: int, *, page_size: int, cursor: str | None
    ) -> tuple[list[uuid.UUID], str | None]:
        """`sweeping.recurring_page`."""
        return await sweeping.recurring_page(self.cql, part, page_size=page_size, cursor=cursor)

    async def get_jobs(self, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Job]:
        """`jobs.get_jobs`."""
        return await jobs.get_jobs(self.cql, job_ids)

    async def swept_through(self, name: str) -> datetime | None:
        """`sweeping.swept_through`."""
        return await sweeping.swept_through(self.cql, name)

    async def mark_swept(self, name: str, through: datetime) -> None:
        """`sweeping.mark_swept`."""
        await sweeping.mark_swept(self.cql, name, through)

    async def due_states(self, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DueState]:
        """`runs.due_states`."""
        return await runs.due_states(self.cql, run_ids)

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

    async def read_shards(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueRun]:
        """`buckets.read_shards`."""
        return await buckets.read_shards(self.cql, shards, since, until)

    async def read_keys(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueKey]:
        """`buckets.read_keys`."""
        return await buckets.read_keys(self.cql, shards, since, until)

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

    # -- JobCatalog (the API) -------------------------------------------------------------------------------------
    async def create_audited_job(self, job: Job, first_run: NewRun | None, now: datetime, change: KeptChange) -> None:
        """`jobs.create_job` with the audit row in its batch."""
        await jobs.create_job(self.cql, job, first_run, now, also=[audit.change_row(*change)])

    async def create_keyed_job(
        self, job: Job, first_run: NewRun | None, now: datetime, request_hash: str, change: KeptChange
    ) -> KeyedJob | None:
        """`jobs.create_keyed_job` with the audit row in its batch."""
        also = [audit.change_row(*change)]
        return await jobs.create_keyed_job(self.cql, job, first_run, now, request_hash, also=also)

    async def complete_keyed_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """`jobs.complete_keyed_job`."""
        await jobs.complete_keyed_job(self.cql, job, first_run, now)

    async def get_keyed_job(self, job_id: uuid.UUID) -> KeyedJob | None:
        """`jobs.get_keyed_job`."""
        return await jobs.get_keyed_job(self.cql, job_id)

    async def update_job(self, job: Job, change: JobChange, now: datetime) -> tuple[bool, int | None]:
        """`jobs.update_job`."""
        return await jobs.update_job(self.cql, job, change, now)

    async def mark_changed(self, run: NewRun, now: datetime) -> None:
        """`runs.mark_changed`."""
        await runs.mark_changed(self.cql, run, now)

    async def retarget_run(self, run: NewRun, now: datetime) -> bool:
        """`runs.retarget`."""
        return await runs.retarget(self.cql, run, now)

    async def revive_run(self, run: NewRun, now: datetime) -> bool:
        """`runs.revive`."""
        return await runs.revive(self.cql, run, now)

    async def list_job_ids(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        state: str | None = None,
        label: str | None = None,
    ) -> tuple[list[uuid.UUID], str | None]:
        """`jobs.list_job_ids`."""
        return await jobs.list_job_ids(self.cql, tenant_id, limit=limit, cursor=cursor, state=state, label=label)

    async def count_jobs(self, tenant_id: str) -> int:
        """`jobs.count_jobs`."""
        return await jobs.count_jobs(self.cql, tenant_id)

    # -- RunHistoryStore ------------------------------------------------------------------------------------------
    async def latest_runs(self, job_id: uuid.UUID, limit: int) -> list[HistoryEntry]:
        """`run_history.latest`."""
        return await run_history.latest(self.cql, job_id, limit)

    async def runs_page(
        self, job_id: uuid.UUID, status: str | None, *, page_size: int, cursor: str | None
    ) -> tuple[list[HistoryEntry], str | None]:
        """`run_history.page_of_job`."""
        return await run_history.page_of_job(self.cql, job_id, status, page_size=page_size, cursor=cursor)

    # -- NameStore ------------------------------------------------------------------------------------------------
    async def name_claim(self, tenant_id: str, name: str) -> NameClaim | None:
        """`names.claim_of`."""
        return await names.claim_of(self.cql, tenant_id, name)

    async def claim_name(self, tenant_id: str, name: str, job_id: uuid.UUID, now: datetime) -> bool:
        """`names.claim`."""
        return await names.claim(self.cql, tenant_id, name, job_id, now)

    async def move_name(self, tenant_id: str, name: str, old: uuid.UUID, new: uuid.UUID, now: datetime) -> bool:
        """`names.move`."""
        return await names.move(self.cql, tenant_id, name, old, new, now)

    async def release_name(self, tenant_id: str, name: str, job_id: uuid.UUID) -> None:
        """`names.release`."""
        await names.release(self.cql, tenant_id, name, job_id)

    # -- IdempotencyStore -----------------------------------------------------------------------------------------
    async def reserve_key(self, tenant_id: str, key: str, request_hash: str, now: datetime, ttl_s: int) -> Reservation:
        """`idempotency.reserve`."""
        return await idempotency.reserve(self.cql, tenant_id, key, request_hash, now, ttl_s)

    async def complete_key(
        self, tenant_id: str, key: str, request_hash: str, status: int, response: str, ttl_s: int
    ) -> None:
        """`idempotency.complete`."""
        await idempotency.complete(self.cql, tenant_id, key, request_hash, status, response, ttl_s)

    async def release_key(self, tenant_id: str, key: str) -> None:
        """`idempotency.release`."""
        await idempotency.release(self.cql, tenant_id, key)

    # -- AuditStore -----------------------------------------------------------------------------------------------
    async def record_change(self, change: JobChangeRecord, ttl_s: int) -> uuid.UUID:
        """`audit.record_change`."""
        return await audit.record_change(self.cql, change, ttl_s)

    async def job_changes(
        self, job_id: uuid.UUID, *, limit: int, cursor: str | None = None
    ) -> tuple[list[JobChangeRecord], str | None]:
        """`audit.job_changes`."""
        return await audit.job_changes(self.cql, job_id, limit=limit, cursor=cursor)

    # -- TenantDirectory ------------------------------------------------------------------------------------------
    async def authenticate(self, key: str) -> str | None:
        """`tenants.authenticate`."""
        return await tenants.authenticate(self.cql, key)

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        """`tenants.get_tenant`."""
        return await tenants.get_tenant(self.cql, tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        """`tenants.list_tenants`."""
        return await tenants.list_tenants(self.cql)

    # -- TenantAdmin ----------------------------------------------------------------------------------------------
    async def create_tenant(self, name: str, now: datetime) -> tuple[Tenant, str]:
        """`tenants.create_tenant`."""
        return await tenants.create_tenant(self.cql, name, now)

    async def tenant_by_name(self, name: str) -> Tenant:
        """`tenants.tenant_by_name`."""
        return await tenants.tenant_by_name(self.cql, name)

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        """`tenants.list_keys`."""
        return await tenants.list_keys(self.cql, tenant_id)

    async def rotate_key(self, tenant_id: str, now: datetime) -> tuple[ApiKey, str]:
        """`tenants.rotate_key`."""
        return await tenants.rotate_key(self.cql, tenant_id, now)

    async def revoke_key(self, tenant_id: str, key_id: str, now: datetime) -> None:
        """`tenants.revoke_key`."""
        await tenants.revoke_key(self.cql, tenant_id, key_id, now)

    async def rotate_signing_secret(self, tenant_id: str) -> Tenant:
        """`tenants.rotate_signing_secret`."""
        return await tenants.rotate_signing_secret(self.cql, tenant_id)

    async def change_tenant(self, tenant_id: str, change: TenantChange) -> Tenant:
        """`tenants.change_tenant`."""
        return await tenants.change_tenant(self.cql, tenant_id, change)

    # -- DeadLetterDesk -------------------------------------------------------------------------------------------
    async def list_dead_letters(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        job_id: uuid.UUID | None = None,
        target_host: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> tuple[list[DeadLetter], str | None]:
        """`dead_letters.list_dead_letters`."""
        return await dead_letters.list_dead_letters(
            self.cql, tenant_id, limit=limit, cursor=cursor, job_id=job_id, target_host=target_host, since=since,
            until=until,
        )  # fmt: skip

    async def get_dead_letter(self, tenant_id: str, run_id: uuid.UUID) -> DeadLetter | None:
        """`dead_letters.get_dead_letter`."""
        return await dead_letters.get_dead_letter(self.cql, tenant_id, run_id)

    async def redrive_run(self, run: NewRun, attempt: int, due_at: datetime, now: datetime) -> bool:
        """`runs.redrive`."""
        return await runs.redrive(self.cql, run, attempt, due_at, now)

    async def mark_redriven(self, letter: DeadLetter, now: datetime) -> None:
        """`dead_letters.mark_redriven`."""
        await dead_letters.mark_redriven(self.cql, letter, now)

    async def purge_dead_letter(self, letter: DeadLetter) -> None:
        """`dead_letters.purge_dead_letter`."""
        await dead_letters.purge_dead_letter(self.cql, letter)

    # -- OperatorStore, readiness ---------------------------------------------------------------------------------
    async def sweeper_counts(self) -> tuple[int, dict[str, int]]:
        """`operator.sweeper_counts`."""
        return await operator.sweeper_counts(self.cql)

    async def dead_letters_since(self, tenant_id: str, since: datetime) -> int:
        """`operator.dead_letters_since`."""
        return await operator.dead_letters_since(self.cql, tenant_id, since)

    async def ping(self) -> None:
        """`CassandraStore.ping`."""
        await self.cql.ping()
