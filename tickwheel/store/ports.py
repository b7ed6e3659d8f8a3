"""The store as the processes see it: small protocols by aggregate, implemented over Cassandra
(`tickwheel.store.tables.CassandraTables`) and in memory (`tickwheel.store.memory.MemoryStore`).

The semantics are the Cassandra ones, and `tests/integration/store/test_contract.py` runs the same tests against
both implementations: every state change of a run is conditional on its status and its attempt (the fencing
token), a job's pointer moves only from the run it names, a checkpoint only under an epoch at least as new.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from schemas.messages import DueRun
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
        self, run: NewRun, expected_attempt: int, worker: str, lease_until: datetime, now: datetime
    ) -> Transition:
        """RUNNING at expected_attempt + 1 if runnable at `expected_attempt` and made for `run.job_version`."""
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
    ) -> bool:
        """Record the outcome of `attempt` if that attempt still holds the run (or already recorded it); with
        `lease_until` (the claim's), its lease check row goes with the description rows."""
        ...

    async def expire_lease(self, run: NewRun, attempt: int, retry_at: datetime | None, now: datetime) -> bool:
        """Time `attempt` out into RETRY at `retry_at` (DEAD when None) if it still runs past its lease."""
        ...

    async def lease_lapsed(self, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
        """Whether `attempt` still holds the run past its lease, or has reported its outcome (asynchronous)."""
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
    """The whole jobs table, page by page (the coordinator's passes)."""

    async def scan_jobs(self, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
        """One page of every job (any tenant, any state) and the cursor of the next (None: the last)."""
        ...


class ReconcilerStore(RunStore, JobScanStore, TenantStore, Protocol):
    """What the reconciler compares and repairs."""

    async def version_started_at(self, job_id: uuid.UUID, version: int) -> datetime | None:
        """When the job reached `version`, if the audit log still holds it."""
        ...

    async def scheduled_between(self, job_id: uuid.UUID, after: datetime, until: datetime) -> list[datetime]:
        """The occurrences the job has a run for in (after, until], newest first."""
        ...


class SweeperStore(ChainStore, JobScanStore, TenantStore, Protocol):
    """What the coordinator's sweeper reads and repairs."""

    async def latest_before(self, job_id: uuid.UUID, before: datetime, limit: int) -> list[HistoryEntry]:
        """The job's newest `limit` history entries scheduled at or before `before`, newest first."""
        ...

    async def due_state(self, run_id: uuid.UUID) -> DueState | None:
        """The run's status, attempt and due time."""
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
