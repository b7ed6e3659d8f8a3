"""Typed requests and answers of the job API, field for field as in schemas/openapi.yaml.

Definition fields are camelCase on the wire and snake_case here (`retry_policy` is `retryPolicy`); fields the
server computes are snake_case on both sides. Instants are aware `datetime`s; states and statuses are enums.
Answers may carry fields a newer API adds: they are ignored, never an error. A unit test compares every model
with the document, so the two cannot drift.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

import msgspec

T = TypeVar("T")
Instant = Annotated[datetime, msgspec.Meta(tz=True)]
"""An aware datetime: an answer with an instant that has no offset fails to decode rather than guess."""


class JobState(enum.StrEnum):
    """A job's state; DELETED jobs are never listed."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    DELETED = "DELETED"


class RunStatus(enum.StrEnum):
    """A run's status; SUCCEEDED, DEAD and CANCELLED are final (a DEAD run may be redriven)."""

    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    RETRY = "RETRY"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"


class ScheduleType(enum.StrEnum):
    ONCE = "once"
    CRON = "cron"
    INTERVAL = "interval"


class Priority(enum.StrEnum):
    URGENT = "urgent"
    DEFAULT = "default"
    BULK = "bulk"


class HttpMethod(enum.StrEnum):
    GET = "GET"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


class DstGap(enum.StrEnum):
    RUN_AFTER_GAP = "run_after_gap"
    SKIP = "skip"


class DstRepeat(enum.StrEnum):
    FIRST = "first"
    SECOND = "second"
    BOTH = "both"


class CatchUp(enum.StrEnum):
    """Missed occurrences after an outage: the newest, the newest catchUpMaxCount, or none (`none` = `skip`)."""

    LATEST = "latest"
    ALL = "all"
    SKIP = "skip"
    NONE = "none"


class Overlap(enum.StrEnum):
    """An occurrence while an earlier run of the job is in flight: start, skip, or wait (one waiting at most)."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"


class RunOrigin(enum.StrEnum):
    """What made a run: its schedule, a trigger or a backfill."""

    SCHEDULE = "schedule"
    TRIGGER = "trigger"
    BACKFILL = "backfill"


class DstFlag(enum.StrEnum):
    """Why a previewed fire is special around a daylight-saving change."""

    SHIFTED = "shifted"
    REPEATED = "repeated"
    SKIPPED_SIBLING = "skipped_sibling"
    AFTER_SKIPPED_GAP = "after_skipped_gap"


class NotifyEvent(enum.StrEnum):
    FAILED = "failed"
    DEAD = "dead"
    RECOVERED = "recovered"
    SUCCEEDED = "succeeded"
    MISSED = "missed"


class ChangeAction(enum.StrEnum):
    CREATE = "create"
    EDIT = "edit"
    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"
    TRIGGER = "trigger"
    BACKFILL = "backfill"
    REDRIVE = "redrive"


class DiffOp(enum.StrEnum):
    ADD = "add"
    REMOVE = "remove"
    REPLACE = "replace"


class Model(msgspec.Struct, frozen=True, kw_only=True):
    """Immutable; change with msgspec.structs.replace. Answers encode every field, so scripts see stable keys."""


class Request(Model, frozen=True, kw_only=True, omit_defaults=True):
    """What the client sends: fields left at their default are not sent, so the API's defaults apply."""


class Definition(Request, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A part of a job's definition: camelCase on the wire."""


def aware(at: datetime, name: str = "instant") -> datetime:
    """`at` if it carries a UTC offset; a naive datetime is ambiguous, so it is refused."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (with a time zone), not {at.isoformat()}")
    return at


class Calendar(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One more cron expression a cron job fires on, in its own zone (default: the schedule's)."""

    expr: str
    tz: str | None = None


class Exclude(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Fires that do not run: local dates or `first/last` ranges, and `except` cron expressions, in `tz`."""

    dates: list[str] = []
    except_: list[str] = msgspec.field(default_factory=list, name="except")
    tz: str | None = None


class Schedule(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """When a job fires: once at an instant, on a cron expression in a zone, or every N seconds."""

    type: ScheduleType
    run_at: str | None = None
    expr: str | None = None
    tz: str = "UTC"
    every_s: int | None = None
    anchor_at: str | None = None
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runs: int | None = None
    dst_gap: DstGap = DstGap.RUN_AFTER_GAP
    dst_repeat: DstRepeat = DstRepeat.FIRST
    catch_up: CatchUp = CatchUp.LATEST
    catch_up_max_count: int = 10
    catch_up_max_age_s: int = 86_400
    overlap: Overlap = Overlap.ALLOW
    calendars: list[Calendar] = []
    exclude: Exclude | None = None
    skip: list[Instant] = []
    paused_until: Instant | None = None

    @classmethod
    def once(cls, at: datetime | str) -> Schedule:
        """One run at an aware instant (or `2026-03-08T02:30:00[America/New_York]`)."""
        return cls(type=ScheduleType.ONCE, run_at=at if isinstance(at, str) else aware(at, "at").isoformat())

    @classmethod
    def cron(cls, expr: str, tz: str = "UTC", **options: Any) -> Schedule:
        """Fires on a 5- or 6-field cron expression in an IANA zone."""
        return cls(type=ScheduleType.CRON, expr=expr, tz=tz, **options)

    @classmethod
    def every(cls, seconds: int, **options: Any) -> Schedule:
        """Fires every `seconds` (at least the tenant's minimum interval)."""
        return cls(type=ScheduleType.INTERVAL, every_s=seconds, **options)


class HttpTarget(
    Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel", tag="http", tag_field="type"
):
    """An HTTP call; the body is the job's payload."""

    url: str
    method: HttpMethod = HttpMethod.POST
    headers: dict[str, str] = {}
    timeout_s: float = 30.0
    success_codes: list[int] | None = None
    max_concurrency: int | None = None
    rate_per_s: float | None = None


class KafkaTarget(
    Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel", tag="kafka", tag_field="type"
):
    """A message on a Kafka topic; the value is the job's payload."""

    topic: str
    key: str | None = None


Target = HttpTarget | KafkaTarget


class RetryPolicy(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """How the platform retries a failing run before it is dead-lettered."""

    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    max_age_s: float | None = 86_400.0
    jitter: float = 0.2


class Notify(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Which run events to send where (signed); no url: the tenant's default URL; events left None: the API's
    default (dead, recovered, missed); an empty list sends nothing."""

    url: str | None = None
    events: list[NotifyEvent] | None = None


class AsyncCompletion(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Opt-in: a target that answers 202 finishes the run later (`complete_run`), under a lease of `lease_s`
    that heartbeats extend, never past the claim plus `max_lease_s`."""

    lease_s: int = 300
    max_lease_s: int = 3600


class CompletionOutcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class JobSpec(Request, frozen=True, kw_only=True, omit_defaults=True):
    """What a tenant asks for: the body of a create (`JobBody` in the API document)."""

    schedule: Schedule
    target: Target
    name: str | None = None
    payload: Any = None
    payload_base64: str | None = msgspec.field(default=None, name="payloadBase64")
    payload_template: bool = msgspec.field(default=False, name="payloadTemplate")
    retry_policy: RetryPolicy | None = msgspec.field(default=None, name="retryPolicy")
    delay_tolerance_s: int = msgspec.field(default=0, name="delayToleranceS")
    priority: Priority = Priority.DEFAULT
    labels: dict[str, str] = {}
    alert_url: str | None = msgspec.field(default=None, name="alertUrl")
    notify: Notify | None = None
    async_completion: AsyncCompletion | None = msgspec.field(default=None, name="asyncCompletion")


class JobPatch(Request, frozen=True, kw_only=True, omit_defaults=True):
    """A PATCH: `state` and/or any definition field; a field left None is kept as it is."""

    state: JobState | None = None
    name: str | None = None
    schedule: Schedule | None = None
    target: Target | None = None
    payload: Any = None
    payload_base64: str | None = msgspec.field(default=None, name="payloadBase64")
    payload_template: bool | None = msgspec.field(default=None, name="payloadTemplate")
    retry_policy: RetryPolicy | None = msgspec.field(default=None, name="retryPolicy")
    delay_tolerance_s: int | None = msgspec.field(default=None, name="delayToleranceS")
    priority: Priority | None = None
    labels: dict[str, str] | None = None
    alert_url: str | None = msgspec.field(default=None, name="alertUrl")
    notify: Notify | None = None
    async_completion: AsyncCompletion | None = msgspec.field(default=None, name="asyncCompletion")


class LastRun(Model, frozen=True, kw_only=True):
    id: uuid.UUID
    status: RunStatus
    attempt: int
    scheduled_at: Instant


class Job(JobSpec, frozen=True, kw_only=True, omit_defaults=False):
    """A job as the API returns it: the definition plus what the server computes."""

    id: uuid.UUID
    state: JobState
    version: int
    next_run_at: Instant | None
    next_run_id: uuid.UUID | None = None
    fired_count: int = 0
    created_at: Instant | None = None
    updated_at: Instant | None = None
    last_run: LastRun | None = None

    def spec(self) -> JobSpec:
        """The definition alone, ready to send back (e.g. to create a copy)."""
        names = [f for f in JobSpec.__struct_fields__]
        return JobSpec(**{name: getattr(self, name) for name in names})


class JobBatch(Request, frozen=True, kw_only=True):
    """The body of a batch create: 1 to 500 job definitions."""

    jobs: list[JobSpec]


class BatchItem(Model, frozen=True, kw_only=True):
    """One item of a batch create: 201 with its job, or the problem a single create would have answered (its
    `field` names the item: `jobs[3].schedule`)."""

    index: int
    status: int
    replayed: bool = False
    job: Job | None = None
    problem: Problem | None = None


class BatchResult(Model, frozen=True, kw_only=True):
    """A batch create's answer: every item in order, and their counts."""

    items: list[BatchItem]
    created: int
    replayed: int
    failed: int


class Page(Model, Generic[T], frozen=True, kw_only=True):
    """One page of a list; the last page has no next_cursor."""

    items: list[T]
    next_cursor: str | None = None


class RunSummary(Model, frozen=True, kw_only=True):
    id: uuid.UUID
    scheduled_at: Instant
    status: RunStatus
    attempt: int
    updated_at: Instant | None = None
    origin: RunOrigin = RunOrigin.SCHEDULE


class Attempt(Model, frozen=True, kw_only=True):
    """One attempt of a run: a call, an expired lease, a deferral or a redrive."""

    attempt: int
    kind: str
    outcome: str | None = None
    worker: str | None = None
    started_at: Instant | None = None
    finished_at: Instant | None = None
    response_code: int | None = None
    error: str | None = None
    response_excerpt: str | None = None


class Run(Model, frozen=True, kw_only=True):
    """One run with its attempts."""

    id: uuid.UUID
    job_id: uuid.UUID
    status: RunStatus
    attempt: int
    lane: str | None = None
    scheduled_at: Instant
    due_at: Instant | None = None
    lease_until: Instant | None = None
    started_at: Instant | None = None
    finished_at: Instant | None = None
    response_code: int | None = None
    last_error: str | None = None
    dead_at: Instant | None = None
    redrive_count: int = 0
    origin: RunOrigin = RunOrigin.SCHEDULE
    attempts: list[Attempt] = []


class DeadLetter(Model, frozen=True, kw_only=True):
    """A run that exhausted its retries."""

    run_id: uuid.UUID
    job_id: uuid.UUID
    dead_at: Instant
    target_host: str | None = None
    last_error: str | None = None
    attempts: list[dict[str, Any]] = []
    redriven_at: Instant | None = None


class Fire(Model, frozen=True, kw_only=True):
    """One upcoming fire: in UTC, in the schedule's zone, and why it is special around a DST change."""

    at: Instant
    local: Instant
    dst: DstFlag | None = None
    expr: str | None = None


class ExcludedFire(Model, frozen=True, kw_only=True):
    """A fire the schedule's exclusions remove, with why (`skipped`, `date ...`, `except ...`)."""

    at: Instant | None = None
    local: Instant | None = None
    dst: str | None = None
    expr: str | None = None
    reason: str | None = None


class Preview(Model, frozen=True, kw_only=True):
    fires: list[Fire]
    excluded: list[ExcludedFire] = []


class RequestedRun(Model, frozen=True, kw_only=True):
    """A run made on request (a trigger or a backfill), durable when answered."""

    id: uuid.UUID
    job_id: uuid.UUID
    status: RunStatus
    scheduled_at: Instant
    origin: RunOrigin
    forced: bool = False


class BackfilledRun(RequestedRun, frozen=True, kw_only=True):
    """A backfilled run: its past occurrence as scheduled_at, and when it fires now."""

    fire_at: Instant | None = None


class Backfill(Model, frozen=True, kw_only=True):
    """The runs of a backfill (written, or with dry_run only listed)."""

    dry_run: bool
    count: int
    runs: list[BackfilledRun]


class Trigger(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a trigger: when (default now) and whether a paused job runs it."""

    at: Instant | None = None
    force: bool = False


class Skip(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a skip: the next `count` occurrences, or one `occurrence`."""

    count: int | None = None
    occurrence: Instant | None = None


class PauseUntil(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a pause-until: nothing fires before `until`."""

    until: Instant


class BackfillRange(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a backfill: the past range [start, end) (`from`, `to` on the wire)."""

    start: Instant = msgspec.field(name="from")
    end: Instant = msgspec.field(name="to")
    dry_run: bool = False


class SchedulePreview(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a schedule preview: a schedule not saved yet, and how many fires to show."""

    schedule: Schedule
    count: int = 10


class DueCounts(Model, frozen=True, kw_only=True):
    """Runs due per bucket of `bucket_s` from `start`, projected from the tenant's active jobs."""

    start: Instant
    bucket_s: int
    counts: list[int]
    jobs_counted: int
    truncated: bool
    """The projection stopped at its limit: the counts are a lower bound."""


class Heartbeat(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a heartbeat: the attempt that holds the run, and by how much to extend its lease."""

    attempt: int
    extend_by_s: int | None = None


class Completion(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The body of a completion: the attempt the target was called with, its outcome and a detail."""

    attempt: int
    outcome: CompletionOutcome
    detail: str | None = None


class Completed(Model, frozen=True, kw_only=True):
    """An asynchronous run's outcome was reported; a worker records it."""

    id: uuid.UUID
    attempt: int
    outcome: CompletionOutcome
    status: RunStatus


class Lease(Model, frozen=True, kw_only=True):
    id: uuid.UUID
    attempt: int
    lease_until: Instant


class Redriven(Model, frozen=True, kw_only=True):
    """One dead run is due again now."""

    run_id: uuid.UUID
    status: RunStatus
    due_at: Instant


class RedriveFilter(Definition, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Which dead letters a bulk redrive (or purge) takes; with dry_run, only which would be."""

    job_id: uuid.UUID | None = None
    target_host: str | None = None
    since: Instant | None = None
    until: Instant | None = None
    dry_run: bool = False
    limit: int | None = None

    @classmethod
    def matching(
        cls,
        job_id: uuid.UUID | str | None,
        target_host: str | None,
        since: datetime | None,
        until: datetime | None,
        dry_run: bool,
        limit: int | None,
    ) -> RedriveFilter:
        """The filter of a bulk call's keyword arguments (a job id given as text is read as a UUID)."""
        return cls(job_id=uuid.UUID(str(job_id)) if job_id else None, target_host=target_host, since=since,
                   until=until, dry_run=dry_run, limit=limit)  # fmt: skip


class BulkRedrive(Model, frozen=True, kw_only=True):
    dry_run: bool
    matched: int
    redriven: int | None = None
    run_ids: list[uuid.UUID]


class BulkPurge(Model, frozen=True, kw_only=True):
    dry_run: bool
    matched: int
    purged: int | None = None
    run_ids: list[uuid.UUID]


class Change(Model, frozen=True, kw_only=True):
    """One operation of a change's diff (a JSON Pointer path; `old` kept for replace and remove)."""

    op: DiffOp
    path: str
    old: Any = None
    value: Any = None


class JobChange(Model, frozen=True, kw_only=True):
    """One entry of a job's audit log."""

    id: uuid.UUID
    job_id: uuid.UUID
    version: int
    action: ChangeAction
    key_id: str | None = None
    changed_at: Instant
    diff: list[Change]
    detail: dict[str, Any]


class Problem(Model, frozen=True, kw_only=True):
    """An error answer (application/problem+json)."""

    type: str
    title: str
    status: int
    detail: str
    field: str | None = None


def to_json(model: Any) -> bytes:
    """A request model as the JSON the API reads."""
    return msgspec.json.encode(model)


def to_builtins(value: Any) -> Any:
    """Any model (or list of them) as plain JSON values, in the API's own shape."""
    return msgspec.to_builtins(value)
