"""What leaves the store: frozen, typed records with aware UTC instants, never driver rows.

Each table family has one converter from its rows (`*_of(row)`, here) and the statements that write it (in
its module). Status columns are enums; absent counters are 0; a null timestamp is None.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from schemas.messages import JobDefinition, decode_definition
from schemas.messages import RunKind as DueKind  # the Literal a due row's kind column holds
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.instants import EPOCH
from tickwheel.core.targets import default_topic_prefix
from tickwheel.store.times import aware, read_at

Row = dict[str, Any]
"""A driver row: only inside tickwheel/store."""


class RunStatus(enum.StrEnum):
    """The state of a run (`runs.status`); `runs.attempt` is its fencing token."""

    SCHEDULED = "SCHEDULED"
    """Written, not yet claimed (attempt 0). May be claimed or cancelled."""
    RUNNING = "RUNNING"
    """Claimed by a worker until lease_until; only that attempt may record the outcome."""
    RETRY = "RETRY"
    """An attempt failed retriably; a run row at due_at carries the attempt the next claim must find."""
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"


RUNNABLE = (RunStatus.SCHEDULED, RunStatus.RETRY)
FINAL = (RunStatus.SUCCEEDED, RunStatus.DEAD, RunStatus.CANCELLED)


class RunKind(enum.StrEnum):
    """What a `runs_by_bucket` row fires: the run's attempt, or the check of a claimed attempt's lease."""

    RUN = "run"
    LEASE_CHECK = "lease_check"


class JobState(enum.StrEnum):
    """The state of a job (`jobs.state`)."""

    ACTIVE = "ACTIVE"
    """Scheduled: `next_run_id` (if any) is the run that fires next."""
    PAUSED = "PAUSED"
    """Nothing scheduled; resume computes the next occurrence from the time of resuming."""
    DELETED = "DELETED"
    """Gone from listings; nothing scheduled; kept so its id and history still answer."""


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run about to be written (or the identity of one written): one occurrence of a job. The one shape of a
    run's identity between the API, the dispatcher and the worker."""

    run_id: uuid.UUID
    job_id: uuid.UUID
    tenant_id: str
    job_version: int
    shard: int
    lane: str
    scheduled_at: datetime
    fire_at: datetime
    tolerance_ms: int = 0
    recurring: bool | None = None
    """Whether the job recurs (its first fire chains the next run); None when not known (read the job)."""
    origin: str | None = None  # None: an occurrence of the schedule; 'trigger' or 'backfill': made on request
    forced: bool = False  # a triggered run that may run while its job is paused
    definition: str | None = None
    """The job's definition (encoded) at `job_version` for a once job's occurrence: its first attempt's due row
    carries it, and its worker claims without reading the job (`runs.bucket_row`); None otherwise."""
    retention_s: int = RUN_RETENTION_S
    """How long the run's rows outlive their due time: its tenant's run retention, resolved by the writer
    (`tickwheel.core.retention.retention_s`); every write of the run's rows carries it (`core.horizon`)."""


def carries_definition(run: NewRun, attempt: int, kind: str) -> bool:
    """Whether the due row of (run, attempt, kind) carries the job's definition: only a once job's occurrence at its
    first attempt, which is its job's one scheduled run (a once job never chains) and so the run every change of the
    job marks before its own conditional write (`mark_changed`). A run made on request (trigger, backfill), a retry,
    a lease check and a recurring job's run are not marked by a change: their worker reads the job."""
    return run.definition is not None and attempt == 0 and kind == RunKind.RUN and run.origin is None


@dataclass(frozen=True, slots=True)
class Run:
    """A `runs` row: the run's state, its fencing attempt, its lease and its last outcome."""

    run_id: uuid.UUID
    job_id: uuid.UUID
    tenant_id: str
    job_version: int
    shard: int
    lane: str
    scheduled_at: datetime
    due_at: datetime | None
    status: RunStatus
    attempt: int
    lease_until: datetime | None = None
    worker: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    response_code: int | None = None
    last_error: str | None = None
    dead_at: datetime | None = None
    redrive_count: int = 0
    origin: str | None = None
    forced: bool = False
    created_at: datetime | None = None
    reported: Mapping[int, str] = field(default_factory=dict)  # attempt -> encoded CompletionReport (async runs)
    changed_at: datetime | None = None  # when a change of its job began (`runs.mark_changed`): claims read the job

    def report(self, attempt: int) -> str | None:
        """What the target reported for `attempt` of an asynchronous run (an encoded CompletionReport), if
        anything."""
        return self.reported.get(attempt)

    def identity(self, retention_s: int = RUN_RETENTION_S) -> NewRun:
        """The run's identity, to write its rows again (due at its due time, else its occurrence), kept for its
        tenant's run retention `retention_s`."""
        return NewRun(
            run_id=self.run_id,
            job_id=self.job_id,
            tenant_id=self.tenant_id,
            job_version=self.job_version,
            shard=self.shard,
            lane=self.lane,
            scheduled_at=self.scheduled_at,
            fire_at=self.due_at or self.scheduled_at,
            retention_s=retention_s,
        )


def run_of(row: Row) -> Run:
    """The record of a `runs` row (SELECT *)."""
    return Run(
        run_id=row["run_id"],
        job_id=row["job_id"],
        tenant_id=row["tenant_id"],
        job_version=row["job_version"] or 0,
        shard=row["shard"] or 0,
        lane=row["lane"] or "default",
        scheduled_at=read_at(row["scheduled_at"]),
        due_at=aware(row["due_at"]),
        status=RunStatus(row["status"]),
        attempt=row["attempt"] or 0,
        lease_until=aware(row["lease_until"]),
        worker=row["worker"],
        started_at=aware(row["started_at"]),
        finished_at=aware(row["finished_at"]),
        response_code=row["response_code"],
        last_error=row["last_error"],
        dead_at=aware(row["dead_at"]),
        redrive_count=row["redrive_count"] or 0,
        origin=row.get("origin"),
        forced=bool(row.get("forced")),
        created_at=aware(row["created_at"]),
        reported=dict(row.get("reported") or {}),
        changed_at=aware(row.get("changed_at")),
    )


@dataclass(frozen=True, slots=True)
class DueKey:
    """A due row's name without its contents (`schemas.messages.DueRun` is the whole row): enough to tell whether a
    wheel holds it and which run of which job it fires. The rescans and the sweeper read these, not whole rows."""

    shard: int
    run_id: uuid.UUID
    attempt: int
    kind: DueKind
    fire_at_ms: int
    job_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class DueState:
    """A run's status, attempt, due time and lease: the sweeper's view of a run."""

    status: RunStatus
    attempt: int
    due_at: datetime | None
    lease_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """What a conditional write on a run compared against when it did not apply (None: the run has no row, or
    the condition does not read that column)."""

    status: RunStatus | None = None
    attempt: int | None = None
    job_version: int | None = None
    reported: frozenset[int] = frozenset()  # the attempts that have reported (an asynchronous run)
    changed: bool = False  # a change of its job began since the run was made (`changed_at` set)


def found_of(row: Row) -> Found:
    """The columns a refused LWT returned."""
    status = row.get("status")
    reported = frozenset(row.get("reported") or ())
    changed = row.get("changed_at") is not None
    return Found(RunStatus(status) if status else None, row.get("attempt"), row.get("job_version"), reported, changed)


@dataclass(frozen=True, slots=True)
class Transition:
    """Whether a conditional write on a run applied; `found` is what it compared against when it did not."""

    applied: bool
    found: Found = Found()
    lease_until: datetime | None = None  # a lease write that applied: the run's lease after it


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt produced, for the run row and its history."""

    status: RunStatus
    response_code: int | None = None
    error: str | None = None
    response_excerpt: str | None = None
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """A `run_attempts` row: one call, lease expiry, deferral or redrive of a run."""

    run_id: uuid.UUID
    attempt: int
    seq: uuid.UUID
    kind: str
    worker: str | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    response_code: int | None
    error: str | None
    response_excerpt: str | None

    def as_json(self) -> dict[str, Any]:
        """The attempt as a JSON object (a dead letter keeps its run's attempts this way)."""
        return {
            "run_id": str(self.run_id),
            "attempt": self.attempt,
            "seq": str(self.seq),
            "kind": self.kind,
            "worker": self.worker,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "outcome": self.outcome,
            "response_code": self.response_code,
            "error": self.error,
            "response_excerpt": self.response_excerpt,
        }


def attempt_of(row: Row) -> Attempt:
    """The record of a `run_attempts` row."""
    return Attempt(
        run_id=row["run_id"],
        attempt=row["attempt"],
        seq=row["seq"],
        kind=row["kind"],
        worker=row["worker"],
        started_at=aware(row["started_at"]),
        finished_at=aware(row["finished_at"]),
        outcome=row["outcome"],
        response_code=row["response_code"],
        error=row["error"],
        response_excerpt=row["response_excerpt"],
    )


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A `runs_by_job` row: one run in its job's history (its status as last described, newest first)."""

    run_id: uuid.UUID
    scheduled_at: datetime
    status: RunStatus
    attempt: int = 0
    updated_at: datetime | None = None
    origin: str | None = None


def history_entry_of(row: Row) -> HistoryEntry:
    """The record of a `runs_by_job` row (any subset of its columns with run_id, scheduled_at and status)."""
    return HistoryEntry(
        run_id=row["run_id"],
        scheduled_at=read_at(row["scheduled_at"]),
        status=RunStatus(row["status"]),
        attempt=row.get("attempt") or 0,
        updated_at=aware(row.get("updated_at")),
        origin=row.get("origin"),
    )


@dataclass(frozen=True, slots=True)
class Job:
    """A `jobs` row: its state, version (bumped by every change, the condition of every update), definition and
    the run it points at next."""

    job_id: uuid.UUID
    tenant_id: str
    shard: int
    state: JobState
    version: int
    definition: JobDefinition
    lane: str
    next_run_at: datetime | None
    next_run_id: uuid.UUID | None
    fired_count: int
    last_run_id: uuid.UUID | None
    last_run_status: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class JobChange:
    """The new values of an update (applied only if the job is still at the version it was read at)."""

    state: JobState
    definition: JobDefinition
    next_run_at: datetime | None
    next_run_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class KeyedJob:
    """The job that already holds an id derived from an Idempotency-Key, and the hash of the request that made it."""

    job: Job
    request_hash: str | None


def job_of(row: Row) -> Job:
    """The record of a `jobs` row (SELECT *). A row written without `updated_at` (never changed since, by a
    writer older than this shape or a test's own insert) counts as updated when it was made (one with neither
    timestamp, at the epoch): a sweep over the table must not stop at it."""
    created_at = aware(row["created_at"]) or aware(row["updated_at"]) or EPOCH
    return Job(
        job_id=row["job_id"],
        tenant_id=row["tenant_id"],
        shard=row["shard"],
        state=JobState(row["state"]),
        version=row["version"],
        definition=decode_definition(row["definition"]),
        lane=row["lane"],
        next_run_at=aware(row["next_run_at"]),
        next_run_id=row["next_run_id"],
        fired_count=row["fired_count"] or 0,
        last_run_id=row["last_run_id"],
        last_run_status=row["last_run_status"],
        created_at=created_at,
        updated_at=aware(row["updated_at"]) or created_at,
    )


@dataclass(frozen=True, slots=True)
class Pointer:
    """The outcome of moving a job's next-run pointer (a conditional write on its version, state and pointer);
    when it did not apply, the job's pointer and version as found (None: no job row)."""

    applied: bool
    next_run_id: uuid.UUID | None = None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class JobHead:
    """What a worker reads of a job before calling: its state, version and definition."""

    job_id: uuid.UUID
    state: JobState
    version: int
    definition: JobDefinition


def job_head_of(job_id: uuid.UUID, row: Row) -> JobHead:
    """The record of `SELECT state, version, definition FROM jobs`."""
    return JobHead(job_id, JobState(row["state"]), row["version"], decode_definition(row["definition"]))


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A `dead_letters` row: a run that exhausted its attempts or failed permanently."""

    tenant_id: str
    dead_at: datetime
    run_id: uuid.UUID
    job_id: uuid.UUID
    target_host: str
    payload: bytes
    last_error: str
    attempts: tuple[dict[str, Any], ...]
    """The run's attempts as JSON objects (`Attempt.as_json`), as they were when it died."""
    redriven_at: datetime | None = None


def dead_letter_of(row: Row) -> DeadLetter:
    """The record of a `dead_letters` row."""
    return DeadLetter(
        tenant_id=row["tenant_id"],
        dead_at=read_at(row["dead_at"]),
        run_id=row["run_id"],
        job_id=row["job_id"],
        target_host=row["target_host"] or "",
        payload=row["payload"] or b"",
        last_error=row["last_error"] or "",
        attempts=tuple(json.loads(row["attempts"] or "[]")),
        redriven_at=aware(row["redriven_at"]),
    )


@dataclass(frozen=True, slots=True)
class Tenant:
    """A `tenants` row: identity, signing secrets (newest first), quotas and operator overrides. The API, the
    worker and the operator commands share this one shape."""

    tenant_id: str
    name: str
    created_at: datetime | None
    signing_secrets: tuple[str, ...]
    max_jobs: int | None = None
    requests_per_s: int | None = None
    min_interval_s: int | None = None
    kafka_topic_prefix: str | None = None  # None: default_topic_prefix(tenant_id)
    concurrency: int | None = None
    retention_days: int | None = None
    weight: int | None = None
    notify_url: str | None = None
    notify_events: frozenset[str] = frozenset()

    @property
    def topic_prefix(self) -> str:
        """The prefix of the Kafka topics the tenant's Kafka targets publish to."""
        return self.kafka_topic_prefix or default_topic_prefix(self.tenant_id)


def tenant_of(row: Row) -> Tenant:
    """The record of a `tenants` row (every column, or the subset a worker reads)."""
    return Tenant(
        tenant_id=row["tenant_id"],
        name=row.get("name") or "",
        created_at=aware(row.get("created_at")),
        signing_secrets=tuple(row.get("signing_secrets") or ()),
        max_jobs=row.get("max_jobs"),
        requests_per_s=row.get("requests_per_s"),
        min_interval_s=row.get("min_interval_s"),
        kafka_topic_prefix=row.get("kafka_topic_prefix"),
        concurrency=row.get("concurrency"),
        retention_days=row.get("retention_days"),
        weight=row.get("weight"),
        notify_url=row.get("notify_url"),
        notify_events=frozenset(row.get("notify_events") or ()),
    )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A shard's fired-through watermark and the owner (and its assignment epoch) that wrote it."""

    shard: int
    fired_through: datetime
    owner_epoch: int
    owner: str
