"""Contracts: the stored job definition and the Kafka message types, with the one codec that reads and writes them.

Nothing else in tickwheel encodes or decodes these shapes. Field names are camelCase on the wire (the same
names the HTTP API uses), snake_case in Python.
"""

from __future__ import annotations

import uuid
from typing import Literal

import msgspec

Lane = Literal["urgent", "default", "bulk"]
LANES: tuple[Lane, ...] = ("urgent", "default", "bulk")
RunKind = Literal["run", "lease_check", "missed"]  # missed: the reconciler's report, for run-event notifications


class Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel", omit_defaults=True):
    pass


class CalendarDoc(Base, frozen=True):
    """One more cron expression a cron job fires on; `tz` defaults to the schedule's."""

    expr: str
    tz: str | None = None


class ExcludeDoc(Base, frozen=True):
    """Fires a recurring job must not run: local dates (`2026-12-25`) or ranges (`2026-12-24/2026-12-31`),
    and `except` cron expressions, all read in `tz` (default: the schedule's)."""

    dates: list[str] = []
    except_: list[str] = msgspec.field(default_factory=list, name="except")
    tz: str | None = None


class ScheduleDoc(Base, frozen=True):
    type: Literal["once", "cron", "interval"]
    run_at: str | None = None
    expr: str | None = None
    tz: str = "UTC"
    every_s: int | None = None
    anchor_at: str | None = None  # interval jobs: fires at anchor + k*every_s; set at creation (startAt or now)
    start_at: str | None = None
    end_at: str | None = None
    max_runs: int | None = None
    dst_gap: Literal["run_after_gap", "skip"] = "run_after_gap"
    dst_repeat: Literal["first", "second", "both"] = "first"
    catch_up: Literal["latest", "all", "skip", "none"] = "latest"  # "none": the older spelling of "skip"
    catch_up_max_count: int = 10
    catch_up_max_age_s: int = 86_400
    overlap: Literal["allow", "skip", "buffer_one"] = "allow"
    calendars: list[CalendarDoc] = []  # cron: more expressions; the job fires on the union
    exclude: ExcludeDoc | None = None
    skip: list[str] = []  # occurrences (instants) that will not run; POST /v1/jobs/{id}/skip adds to it
    paused_until: str | None = None  # no fire before this instant; POST /v1/jobs/{id}/pause sets it


class HttpTarget(Base, frozen=True, tag="http", tag_field="type"):
    url: str
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = {}
    timeout_s: float = 30.0
    success_codes: list[int] | None = None
    # Flow limits for this job's target host (the worker's defaults apply when unset); they bound every call the
    # worker makes to that host while this job's run waits, so they can only make the host's limits stricter.
    max_concurrency: int | None = None
    rate_per_s: float | None = None


class KafkaTarget(Base, frozen=True, tag="kafka", tag_field="type"):
    topic: str
    key: str | None = None


Target = HttpTarget | KafkaTarget


class RetryDoc(Base, frozen=True):
    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    max_age_s: float | None = 86_400.0
    jitter: float = 0.2


NotifyEventName = Literal["failed", "dead", "recovered", "succeeded", "missed"]


class NotifyDoc(Base, frozen=True):
    """Which of a job's run events to send, and where (no URL: the tenant's default URL)."""

    events: tuple[NotifyEventName, ...] = ("dead", "recovered", "missed")
    url: str | None = None


class AsyncCompletionDoc(Base, frozen=True):
    """A job's opt-in to asynchronous completion: a target that answers 202 leaves the run RUNNING under a lease
    of `lease_s` (heartbeats extend it), and reports the outcome with POST /v1/runs/{run_id}/complete; no lease
    runs past the claim plus `max_lease_s`."""

    lease_s: int = 300
    max_lease_s: int = 3600


class JobDefinition(Base, frozen=True):
    """What a tenant asked for; stored as one document in `jobs.definition`."""

    schedule: ScheduleDoc
    target: Target
    payload: str = ""
    payload_encoding: Literal["json", "base64", "text"] = "json"
    payload_template: bool = False  # render {{scheduled_at}} etc. in the payload's string values (core.templating)
    retry_policy: RetryDoc = RetryDoc()
    delay_tolerance_s: int = 0
    priority: Lane = "default"
    labels: dict[str, str] = {}
    alert_url: str | None = None
    name: str | None = None
    notify: NotifyDoc | None = None
    async_completion: AsyncCompletionDoc | None = None


class DueRun(Base, frozen=True):
    """A run row that is due: announced on the near-term topic and fired onto a lane topic."""

    run_id: uuid.UUID
    job_id: uuid.UUID
    tenant_id: str
    shard: int
    attempt: int
    kind: RunKind
    lane: Lane
    job_version: int
    scheduled_at_ms: int
    fire_at_ms: int
    tolerance_ms: int = 0
    fired_at_ms: int = 0
    recurring: bool | None = None  # None: written before the flag existed (firing reads the job to know)
    missed_reason: str | None = None  # kind "missed": why the reconciler did not repair it (core.reconcile.Verdict)
    definition: str | None = None
    """The job's definition (encoded JobDefinition) at `job_version`: only a once job's first attempt carries it, so
    its worker claims without reading the job (None: the worker reads the job)."""


class OwnerAlert(Base, frozen=True):
    """Sent (signed) to a job owner's alert target when one of their runs is dead-lettered."""

    type: Literal["run.dead"]
    run_id: uuid.UUID
    job_id: uuid.UUID
    tenant_id: str
    attempts: int
    last_error: str
    dead_at: str


class RunEventData(Base, frozen=True):
    run_id: uuid.UUID
    job_id: uuid.UUID
    tenant_id: str
    attempt: int
    status: str
    scheduled_at: str
    response_code: int | None = None
    error: str | None = None


class RunEventMessage(Base, frozen=True):
    """A run event as a Standard Webhooks payload (`type`, `timestamp`, `data`), sent signed to a tenant's
    notification URL (worker/notify.py)."""

    type: str  # run.failed | run.dead | run.recovered | run.succeeded | run.missed
    timestamp: str
    data: RunEventData


class CompletionReport(Base, frozen=True):
    """An asynchronous run's outcome as its target reported it (POST /v1/runs/{run_id}/complete), kept in
    `runs.reported[attempt]` until a worker records it."""

    outcome: Literal["succeeded", "failed"]
    detail: str | None = None
    reported_at_ms: int = 0


class ShardAssignment(Base, frozen=True):
    """The coordinator's shard assignment, published at /dispatchers/assignment in ZooKeeper. `epoch` grows
    with every change and fences checkpoint writes; `members` maps a member znode name to [start, end) ranges."""

    epoch: int
    shards: int
    members: dict[str, list[tuple[int, int]]] = {}


class DispatcherMember(Base, frozen=True):
    """The data of a dispatcher's member znode: its name and where its health server listens, which the
    coordinator probes to notice a dead process long before its ZooKeeper session expires."""

    name: str
    host: str
    port: int


_json_encoder = msgspec.json.Encoder()


def encode(message: msgspec.Struct) -> bytes:
    """Serialize any contract type to JSON bytes."""
    return _json_encoder.encode(message)


def decode_definition(data: bytes | str) -> JobDefinition:
    return msgspec.json.decode(data, type=JobDefinition)


def decode_due_run(data: bytes | str) -> DueRun:
    return msgspec.json.decode(data, type=DueRun)


def decode_alert(data: bytes | str) -> OwnerAlert:
    return msgspec.json.decode(data, type=OwnerAlert)


def decode_run_event(data: bytes | str) -> RunEventMessage:
    return msgspec.json.decode(data, type=RunEventMessage)


def decode_report(data: bytes | str) -> CompletionReport:
    return msgspec.json.decode(data, type=CompletionReport)


def topic_names(prefix: str) -> dict[str, str]:
    """The platform's Kafka topics under a prefix (a test namespace, or '' in production)."""
    names: dict[str, str] = {lane: f"{prefix}tickwheel.runs.{lane}" for lane in LANES}
    names["near"] = f"{prefix}tickwheel.near"
    return names


def worker_group(prefix: str, lane: Lane) -> str:
    """The consumer group of the workers of one lane (its lag is the lane's backlog)."""
    return f"{prefix}tickwheel-worker-{lane}"


def decode_assignment(data: bytes | str) -> ShardAssignment:
    return msgspec.json.decode(data, type=ShardAssignment)


def decode_member(data: bytes | str) -> DispatcherMember | None:
    """A member znode's data; None for data written by an older dispatcher (`host:name`)."""
    try:
        return msgspec.json.decode(data, type=DispatcherMember)
    except msgspec.DecodeError:
        return None
