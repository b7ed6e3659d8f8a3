"""The store as the processes see it: small protocols by aggregate, implemented over Cassandra
(`tickwheel.store.tables.CassandraTables`) and in memory (`tickwheel.store.memory.MemoryStore`).

The semantics are the Cassandra ones, and `tests/integration/store/test_contract.py` runs the same tests against
both implementations: every state change of a run is conditional on its status and its attempt (the fencing
token), a job's pointer moves only from the run it names, a checkpoint only under an epoch at least as new.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from schemas.messages import DueRun
from tickwheel.store.audit import JobChangeRecord
from tickwheel.store.idempotency import Reservation
from tickwheel.store.names import NameClaim
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


class RunStore(Protocol):
    """The run state machine (SCHEDULED -> RUNNING -> SUCCEEDED | RETRY | DEAD, or CANCELLED), fenced by
    `runs.attempt`. The rows that find a run again are written before its conditional write."""

    async def get_run(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None when it has no row."""
        ...

    async def get_attempts(self, run_id: uuid.UUID) -> list[Attempt]:
        """Every attempt, deferral, lease expiry and redrive of the run, in order."""
        ...

    async def create_run(self, run: NewRun, now: datetime) -> bool:
        """Write a run if absent (and its due row while it is SCHEDULED); False when it already existed."""
        ...

    async def write_new_run(self, run: NewRun, now: datetime) -> None:
        """Write a run nobody can have written yet, with no condition."""
        ...

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
        """RUNNING at expected_attempt + 1 if runnable at `expected_attempt` and made for `run.job_version` (with
        `unchanged`, also only while no change of its job has begun since: `found.changed` when refused for it)."""
        ...

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
        """Record the outcome of `attempt` if that attempt still holds the run (or already recorded it); with
        `lease_until` (the claim's), its lease check row goes with the description rows, and with `fired_at`, the
        due row the attempt was fired from (attempt - 1, kind run, due then)."""
        ...

    async def expire_lease(self, run: NewRun, attempt: int, retry_at: datetime | None, now: datetime) -> bool:
        """Time `attempt` out into RETRY at `retry_at` (DEAD when None) if it still runs past its lease."""
        ...

    async def lease_lapsed(self, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
        """Whether `attempt` still holds the run past its lease, or has reported its outcome (asynchronous)."""
        ...

    async def extend_lease(
        self, run_id: uuid.UUID, attempt: int, lease_until: datetime, now: datetime, retention_s: int
    ) -> Transition:
        """Heartbeat: move the lease to `lease_until` if `attempt` still holds the run (kept for the tenant's run
        retention `retention_s`); a later lease is kept (applied, with that lease), never shortened."""
        ...

    async def hold_lease(
        self, run: NewRun, attempt: int, claimed_until: datetime, lease_until: datetime, now: datetime
    ) -> Transition:
        """An asynchronous run's target answered 202: its claim's lease `claimed_until` becomes `lease_until` if
        `attempt` still holds the run; a lease a heartbeat already moved is kept (applied, with that lease)."""
        ...

    async def report_completion(self, run: NewRun, attempt: int, report: str, now: datetime) -> Transition:
        """Fence `attempt`'s reported outcome into the run, once, while it holds the run (lease check row at
        `now` first)."""
        ...

    async def defer(self, run: NewRun, attempt: int, until: datetime, reason: str, now: datetime) -> None:
        """Put the run back at `until` with the same attempt (no attempt spent)."""
        ...

    async def cancel(self, run: NewRun, now: datetime) -> bool:
        """CANCELLED if not started (SCHEDULED or RETRY)."""
        ...


class JobStore(Protocol):
    """Jobs as firing and calling read them, and the pointer chaining moves."""

    async def get_job(self, job_id: uuid.UUID) -> Job | None:
        """The job (any state), or None."""
        ...

    async def read_state(self, job_id: uuid.UUID) -> JobHead | None:
        """The job's state, version and definition (a worker's read before calling)."""
        ...

    async def create_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """Write a new job, its listing and its first run, all or nothing."""
        ...

    async def move_pointer(
        self, job: Job, current_run_id: uuid.UUID, following: NewRun | None, fired_count: int, now: datetime
    ) -> Pointer:
        """Point the job from `current_run_id` to `following` while it is ACTIVE at `job.version`."""
        ...

    async def earlier_in_flight(self, job_id: uuid.UUID, before: datetime) -> int:
        """How many of the job's latest runs scheduled before `before` are not final."""
        ...


class DueRowStore(Protocol):
    """`runs_by_bucket`: what the dispatchers load into their wheels."""

    async def read_range(self, shard: int, since: datetime, until: datetime) -> list[DueRun]:
        """Every row of `shard` with since <= fire_at < until."""
        ...

    async def read_shards(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueRun]:
        """Every row of each of `shards` (a small group) with since <= fire_at < until, in no particular order."""
        ...

    async def read_keys(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueKey]:
        """The names of the rows `read_shards` would return (a fraction of their bytes)."""
        ...


class CheckpointStore(Protocol):
    """Fired-through watermarks, fenced by the owner's assignment epoch."""

    async def read_checkpoints(self, shards: Iterable[int]) -> dict[int, Checkpoint]:
        """The checkpoints of `shards` that exist."""
        ...

    async def advance_checkpoints(
        self, marks: Mapping[int, datetime], epoch: int, owner: str, now: datetime
    ) -> dict[int, bool]:
        """Move each shard's watermark; False for a shard a newer epoch has written."""
        ...


class TenantStore(Protocol):
    """What a worker reads of a tenant."""

    async def call_settings(self, tenant_id: str) -> Tenant:
        """Secrets, Kafka prefix, caps and notification settings (none for a tenant with no row)."""
        ...


class DeadLetterStore(Protocol):
    """Dead letters as a worker writes them."""

    async def add_dead_letter(self, letter: DeadLetter, ttl_s: int, run_retention_s: int) -> None:
        """Write the letter (kept `ttl_s`) and stamp the run's `dead_at` (kept `run_retention_s`, as its run)."""
        ...


class HistoryStore(Protocol):
    """A job's run history as the worker's notifications read it."""

    async def previous_status(self, job_id: uuid.UUID, before: datetime) -> str | None:
        """The status of the job's latest run scheduled before `before` (None: it has none)."""
        ...


class FarStore(TenantStore, Protocol):
    """`runs_far`: first attempts due beyond the far horizon, by (UTC day, shard), until the mover moves them."""

    async def read_far_day(self, day: datetime, shard: int) -> list[NewRun]:
        """Every run waiting in the (day, shard) partition."""
        ...

    async def move_far_run(self, run: NewRun, now: datetime) -> bool:
        """Write the due row of a waiting run; False when it was cancelled, attempted or its job moved on."""
        ...

    async def delete_far_day(self, day: datetime, shard: int) -> None:
        """Drop a moved partition whole."""
        ...


class CoordinatorStore(Protocol):
    """What the active coordinator reads besides its sweeper and mover."""

    async def highest_epoch(self) -> int:
        """The highest owner epoch any checkpoint holds (0 without any): a new assignment must exceed it."""
        ...

    async def due_per_minute(self, start: datetime, minutes: int, shards: int) -> list[int]:
        """Due rows in each minute from `start`'s minute on, over shards 0 .. shards - 1 (the forecast)."""
        ...


class ChainStore(RunStore, JobStore, Protocol):
    """What chaining a recurring job at fire time reads and writes."""


class JobScanStore(Protocol):
    """The whole jobs table, page by page (the sweeper's first pass on a keyspace)."""

    async def scan_jobs(self, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
        """One page of every job (any tenant, any state) and the cursor of the next (None: the last)."""
        ...


class RecurringIndex(Protocol):
    """The recurring jobs' index (`sweeping.PARTS` partitions, by shard) and the jobs it names."""

    async def recurring_page(
        self, part: int, *, page_size: int, cursor: str | None
    ) -> tuple[list[uuid.UUID], str | None]:
        """One page of the ids in partition `part` of the index and the cursor of the next (None: the last)."""
        ...

    async def get_jobs(self, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Job]:
        """Each job (any state; ids without one left out)."""
        ...


class ReconcilerStore(RunStore, RecurringIndex, TenantStore, Protocol):
    """What the reconciler compares and repairs: the ACTIVE recurring jobs the index names, not every job kept."""

    async def version_started_at(self, job_id: uuid.UUID, version: int) -> datetime | None:
        """When the job reached `version`, if the audit log still holds it."""
        ...

    async def scheduled_between(self, job_id: uuid.UUID, after: datetime, until: datetime) -> list[datetime]:
        """The occurrences the job has a run for in (after, until], newest first."""
        ...


class SweeperStore(ChainStore, JobScanStore, RecurringIndex, DueRowStore, TenantStore, Protocol):
    """What the coordinator's sweeper reads and repairs: the recurring jobs' index, the due rows of the minutes
    past their grace, the runs they name (the whole jobs table only on a keyspace's first pass)."""

    async def recurring_jobs(self, part: int) -> list[uuid.UUID]:
        """The ids in partition `part` of the recurring jobs' index (`sweeping.PARTS` of them, by shard)."""
        ...

    async def forget_recurring(self, job: Job) -> None:
        """Drop the job from the recurring jobs' index as of the version read (a row written since stays)."""
        ...

    async def mark_recurring(self, job: Job) -> None:
        """Put the job in the recurring jobs' index."""
        ...

    async def mark_all_recurring(self, jobs: Sequence[Job]) -> None:
        """Put each of `jobs` in the recurring jobs' index (written together)."""
        ...

    async def swept_through(self, name: str) -> datetime | None:
        """The first minute the sweeper `name` has not swept yet (None: it never swept)."""
        ...

    async def mark_swept(self, name: str, through: datetime) -> None:
        """Every minute before `through` is swept."""
        ...

    async def due_states(self, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DueState]:
        """Each run's status, attempt, due time and lease (runs without a row left out)."""
        ...

    async def move_due(self, run: NewRun, status: RunStatus, attempt: int, due_at: datetime, now: datetime) -> bool:
        """Move the run's due time if it is still `status` at `attempt`."""
        ...

    async def write_due_row(self, run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> None:
        """A due row firing (run, attempt, kind) at `fire_at`."""
        ...

    async def add_sweep(self, repairs: Mapping[str, int]) -> None:
        """Count one finished sweep and its repairs (the operator console's counters)."""
        ...


class DispatcherStore(ChainStore, DueRowStore, CheckpointStore, TenantStore, Protocol):
    """Everything the dispatcher engine needs of the store."""


class WorkerStore(RunStore, JobStore, TenantStore, DeadLetterStore, Protocol):
    """Everything the worker pipeline needs of the store."""


# -- The API's aggregates ---------------------------------------------------------------------------------------

KeptChange = tuple[JobChangeRecord, int]
"""An audit log change and how long it is kept (s): what a create writes in its own batch."""


class ReschedulingStore(Protocol):
    """What replacing a job's definition and its scheduled run writes (`store.jobs.reschedule`, written once)."""

    async def update_job(self, job: Job, change: JobChange, now: datetime) -> tuple[bool, int | None]:
        """Apply `change` if the job is still at `job.version`: (applied, the version found when it was not)."""
        ...

    async def get_run(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None when it has no row."""
        ...

    async def mark_changed(self, run: NewRun, now: datetime) -> None:
        """Note on the run that a change of its job begins (before the job's write): claims then read the job (a run
        with no row yet is written CANCELLED and marked)."""
        ...

    async def create_run(self, run: NewRun, now: datetime) -> bool:
        """Write a run if absent; False when it already existed."""
        ...

    async def cancel(self, run: NewRun, now: datetime) -> bool:
        """CANCELLED if not started (SCHEDULED or RETRY)."""
        ...

    async def retarget_run(self, run: NewRun, now: datetime) -> bool:
        """Move a still-unstarted run (SCHEDULED, attempt 0) to `run.job_version` and its lane."""
        ...

    async def revive_run(self, run: NewRun, now: datetime) -> bool:
        """SCHEDULED again at `run.fire_at` if it was cancelled before any attempt."""
        ...


class JobCatalog(JobStore, ReschedulingStore, Protocol):
    """Jobs as their owners make and change them: created with their audit row, versioned, listed by tenant."""

    async def create_audited_job(self, job: Job, first_run: NewRun | None, now: datetime, change: KeptChange) -> None:
        """Write a new job, its listing, its first run and its audit row, all or nothing."""
        ...

    async def create_keyed_job(
        self, job: Job, first_run: NewRun | None, now: datetime, request_hash: str, change: KeptChange
    ) -> KeyedJob | None:
        """Create a job whose id an Idempotency-Key made, if that id is free (None); else the job holding it."""
        ...

    async def complete_keyed_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """Write again what a keyed create that died after its insert may not have written, as it did at its time
        `now` (nothing written since is undone): its first run with its due and history rows, its listing (unless
        the job was deleted since)."""
        ...

    async def get_keyed_job(self, job_id: uuid.UUID) -> KeyedJob | None:
        """The job an Idempotency-Key's id names, with the hash of the request that made it; None if never made."""
        ...

    async def reschedule(
        self, job: Job, change: JobChange, next_run: NewRun | None, now: datetime, *, retention_s: int
    ) -> tuple[bool, int | None]:
        """Apply `change` if the job is still at `job.version`, then replace its scheduled run by `next_run` (the
        runs written kept for the tenant's run retention `retention_s`)."""
        ...

    async def list_job_ids(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        state: str | None = None,
        label: str | None = None,
    ) -> tuple[list[uuid.UUID], str | None]:
        """One page of the tenant's listed job ids (by state, by a `key=value` label) and the next cursor."""
        ...

    async def count_jobs(self, tenant_id: str) -> int:
        """How many listed (not deleted) jobs the tenant has."""
        ...


class RunHistoryStore(Protocol):
    """A job's runs as its owner lists them (`runs_by_job`, newest first)."""

    async def latest_runs(self, job_id: uuid.UUID, limit: int) -> list[HistoryEntry]:
        """The job's newest `limit` history entries."""
        ...

    async def runs_page(
        self, job_id: uuid.UUID, status: str | None, *, page_size: int, cursor: str | None
    ) -> tuple[list[HistoryEntry], str | None]:
        """One page of the job's history (optionally of one status) and the cursor of the next."""
        ...


class NameStore(Protocol):
    """A tenant's job names, each claimed and moved only by a conditional write."""

    async def name_claim(self, tenant_id: str, name: str) -> NameClaim | None:
        """Where the tenant's `name` points, if anywhere."""
        ...

    async def claim_name(self, tenant_id: str, name: str, job_id: uuid.UUID, now: datetime) -> bool:
        """Point an unused name at `job_id`; False when it is taken."""
        ...

    async def move_name(self, tenant_id: str, name: str, old: uuid.UUID, new: uuid.UUID, now: datetime) -> bool:
        """Point the name from `old` to `new`; False when it no longer points at `old`."""
        ...

    async def release_name(self, tenant_id: str, name: str, job_id: uuid.UUID) -> None:
        """Free the name if it still points at `job_id`."""
        ...


class IdempotencyStore(Protocol):
    """Idempotency keys: reserved once, answered, replayed until they expire."""

    async def reserve_key(self, tenant_id: str, key: str, request_hash: str, now: datetime, ttl_s: int) -> Reservation:
        """Reserve `key` for this request, or say what the request holding it asked and answered."""
        ...

    async def complete_key(
        self, tenant_id: str, key: str, request_hash: str, status: int, response: str, ttl_s: int
    ) -> None:
        """Keep the answer given to the request that reserved `key`."""
        ...

    async def release_key(self, tenant_id: str, key: str) -> None:
        """Forget a reservation whose request failed, so a retry runs again."""
        ...


class AuditStore(Protocol):
    """The audit log of job changes."""

    async def record_change(self, change: JobChangeRecord, ttl_s: int) -> uuid.UUID:
        """Append one change to its job's log, kept `ttl_s`; returns its change id."""
        ...

    async def job_changes(
        self, job_id: uuid.UUID, *, limit: int, cursor: str | None = None
    ) -> tuple[list[JobChangeRecord], str | None]:
        """One page of the job's changes, newest first, and the cursor of the next."""
        ...


class TenantDirectory(Protocol):
    """Tenants as the API authenticates and lists them."""

    async def authenticate(self, key: str) -> str | None:
        """The tenant id owning a live API key, or None."""
        ...

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        """The tenant, or None."""
        ...

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, by name."""
        ...


class TenantAdmin(Protocol):
    """Tenants and their keys as the operator's `tickwheel tenants` commands manage them."""

    async def create_tenant(self, name: str, now: datetime) -> tuple[Tenant, str]:
        """A new tenant `name` (unique) with a signing secret and a first API key: (tenant, the key)."""
        ...

    async def tenant_by_name(self, name: str) -> Tenant:
        """The tenant named `name`; NotFound when there is none."""
        ...

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, by name."""
        ...

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        """The tenant's keys, revoked ones included, oldest first."""
        ...

    async def rotate_key(self, tenant_id: str, now: datetime) -> tuple[ApiKey, str]:
        """A new key (returned once), every older live key revoked."""
        ...

    async def revoke_key(self, tenant_id: str, key_id: str, now: datetime) -> None:
        """Revoke one of the tenant's keys; NotFound when it has no such key."""
        ...

    async def rotate_signing_secret(self, tenant_id: str) -> Tenant:
        """A new signing secret first, the previous one kept."""
        ...

    async def change_tenant(self, tenant_id: str, change: TenantChange) -> Tenant:
        """Apply the operator's overrides; the tenant as it now is."""
        ...


class RedriveStore(Protocol):
    """What redriving a dead letter writes (`store.dead_letters.redrive_dead_letter`, written once)."""

    async def get_run(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None when it has no row."""
        ...

    async def redrive_run(self, run: NewRun, attempt: int, due_at: datetime, now: datetime) -> bool:
        """RETRY at `due_at` for `run.job_version` if the run is still DEAD at `attempt`."""
        ...

    async def mark_redriven(self, letter: DeadLetter, now: datetime) -> None:
        """Stamp the letter with when its run was redriven."""
        ...


class DeadLetterDesk(RedriveStore, Protocol):
    """A tenant's dead letters as the API lists, redrives and purges them."""

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
        """One page of the tenant's dead letters, newest first, filtered, and the cursor of the next."""
        ...

    async def get_dead_letter(self, tenant_id: str, run_id: uuid.UUID) -> DeadLetter | None:
        """The tenant's live dead letter of `run_id`, or None."""
        ...

    async def redrive_dead_letter(
        self, letter: DeadLetter, due_at: datetime, now: datetime, *, job_version: int, retention_s: int
    ) -> Run | None:
        """One more attempt of the dead run, due at `due_at`, for the job at `job_version`, kept for the tenant's run
        retention `retention_s` (None: not DEAD)."""
        ...

    async def purge_dead_letter(self, letter: DeadLetter) -> None:
        """Delete the letter."""
        ...


class OperatorStore(CheckpointStore, Protocol):
    """What the operator console reads: checkpoints, the forecast, sweeper counters, dead letters per tenant."""

    async def due_per_minute(self, start: datetime, minutes: int, shards: int) -> list[int]:
        """Due rows in each minute from `start`'s minute on, over shards 0 .. shards - 1."""
        ...

    async def sweeper_counts(self) -> tuple[int, dict[str, int]]:
        """(sweeps finished, repairs by reason)."""
        ...

    async def dead_letters_since(self, tenant_id: str, since: datetime) -> int:
        """How many runs of the tenant went dead at or after `since`."""
        ...


class ApiStore(
    RunStore,
    JobCatalog,
    RunHistoryStore,
    NameStore,
    IdempotencyStore,
    AuditStore,
    TenantDirectory,
    DeadLetterDesk,
    OperatorStore,
    Protocol,
):
    """Everything the API process needs of the store."""

    async def ping(self) -> None:
        """Raise `Unavailable` unless the store answers (the readiness probe)."""
        ...
