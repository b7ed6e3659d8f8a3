"""Every API operation as a pure request description (`Call`) and the decoder of its answer.

`Client` and `AsyncClient` only send these, so both have the same behaviour by construction. `OPERATIONS`
names the client method of each (method, path) in schemas/openapi.yaml, with its request and answer models;
a unit test holds it equal to the document.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

import httpx
import msgspec

from . import models as m
from .errors import UnexpectedAnswer, error_for
from .retry import retry_after_s

T = TypeVar("T")
IDEMPOTENCY_HEADER = "Idempotency-Key"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]{0,199}$")  # the API's job names (schemas/openapi.yaml)
JSON = "application/json"


@dataclasses.dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, ready to send (and to send again, unchanged, with the same Idempotency-Key)."""

    method: str
    path: str
    decode: Callable[[httpx.Response], T]
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    body: bytes | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def build(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        return http.build_request(self.method, self.path, params=self.params, content=self.body, headers=self.headers)


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """An operation of the API document and the client method that calls it."""

    method: str
    path: str
    client_method: str
    request: Any = None
    answer: Any = None


OPERATIONS = (
    Operation("GET", "/healthz", "health"),
    Operation("GET", "/readyz", "ready"),
    Operation("GET", "/metrics", "metrics"),
    Operation("GET", "/v1/openapi.json", "openapi"),
    Operation("POST", "/v1/jobs", "create_job", m.JobSpec, m.Job),
    Operation("POST", "/v1/jobs/batch", "create_jobs", m.JobBatch, m.BatchResult),
    Operation("GET", "/v1/jobs", "list_jobs", None, m.Page[m.Job]),
    Operation("GET", "/v1/jobs/{job_id}", "get_job", None, m.Job),
    Operation("PATCH", "/v1/jobs/{job_id}", "update_job", m.JobPatch, m.Job),
    Operation("DELETE", "/v1/jobs/{job_id}", "delete_job"),
    Operation("GET", "/v1/jobs/{job_id}/runs", "list_runs", None, m.Page[m.RunSummary]),
    Operation("GET", "/v1/jobs/{job_id}/preview", "preview_job", None, m.Preview),
    Operation("POST", "/v1/schedules/preview", "preview_schedule", m.SchedulePreview, m.Preview),
    Operation("GET", "/v1/due-counts", "due_counts", None, m.DueCounts),
    Operation("GET", "/v1/runs/{run_id}", "get_run", None, m.Run),
    Operation("POST", "/v1/runs/{run_id}/heartbeat", "heartbeat", m.Heartbeat, m.Lease),
    Operation("POST", "/v1/runs/{run_id}/complete", "complete_run", m.Completion, m.Completed),
    Operation("GET", "/v1/dead-letters", "list_dead_letters", None, m.Page[m.DeadLetter]),
    Operation("POST", "/v1/dead-letters/{run_id}/redrive", "redrive", None, m.Redriven),
    Operation("POST", "/v1/dead-letters/redrive", "redrive_many", m.RedriveFilter, m.BulkRedrive),
    Operation("PUT", "/v1/jobs/by-name/{name}", "put_job_by_name", m.JobSpec, m.Job),
    Operation("GET", "/v1/jobs/by-name/{name}", "get_job_by_name", None, m.Job),
    Operation("PATCH", "/v1/jobs/by-name/{name}", "update_job_by_name", m.JobPatch, m.Job),
    Operation("DELETE", "/v1/jobs/by-name/{name}", "delete_job_by_name"),
    Operation("POST", "/v1/jobs/{job_id}/trigger", "trigger_job", m.Trigger, m.RequestedRun),
    Operation("POST", "/v1/jobs/{job_id}/skip", "skip_occurrences", m.Skip, m.Job),
    Operation("POST", "/v1/jobs/{job_id}/pause", "pause_until", m.PauseUntil, m.Job),
    Operation("POST", "/v1/jobs/{job_id}/backfill", "backfill", m.BackfillRange, m.Backfill),
    Operation("GET", "/v1/jobs/{job_id}/history", "list_history", None, m.Page[m.JobChange]),
    Operation("DELETE", "/v1/dead-letters/{run_id}", "purge"),
    Operation("POST", "/v1/dead-letters/purge", "purge_many", m.RedriveFilter, m.BulkPurge),
)


def finish(call: Call[T], response: httpx.Response) -> T:
    """The decoded answer, or the typed error its problem+json describes."""
    if response.status_code >= 400:
        try:
            document: Any = response.json()
        except ValueError:
            document = response.text[:200]
        raise error_for(response.status_code, document, retry_after_s(response.headers.get("Retry-After")))
    try:
        return call.decode(response)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise UnexpectedAnswer(f"{call.method} {call.path} answered a body this client cannot read: {exc}") from None


def _model(kind: type[T]) -> Callable[[httpx.Response], T]:
    return lambda response: msgspec.json.decode(response.content, type=kind)


def _nothing(response: httpx.Response) -> None:
    return None


def _mutation(method: str, path: str, decode: Callable[[httpx.Response], T], *, body: Any = None,
              key: str | None, headers: Mapping[str, str] | None = None) -> Call[T]:  # fmt: skip
    sent = {IDEMPOTENCY_HEADER: key or str(uuid.uuid4()), **(headers or {})}
    content = None
    if body is not None:
        content = m.to_json(body)
        sent["Content-Type"] = JSON
    return Call(method, path, decode, body=content, headers=sent)


def _params(**values: Any) -> dict[str, str]:
    """Query parameters: None left out, enums by value, instants as RFC 3339 (aware only)."""
    params = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            value = m.aware(value, name).isoformat()
        params[name] = str(value.value if isinstance(value, enum.Enum) else value)
    return params


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", _model(dict[str, Any]))


def ready() -> Call[dict[str, Any]]:
    return Call("GET", "/readyz", _model(dict[str, Any]))


def metrics() -> Call[str]:
    return Call("GET", "/metrics", lambda response: response.text)


def openapi() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/openapi.json", _model(dict[str, Any]))


def create_job(spec: m.JobSpec, key: str | None) -> Call[m.Job]:
    return _mutation("POST", "/v1/jobs", _model(m.Job), body=spec, key=key)


def create_jobs(batch: m.JobBatch, key: str | None) -> Call[m.BatchResult]:
    return _mutation("POST", "/v1/jobs/batch", _model(m.BatchResult), body=batch, key=key)


def list_jobs(state: Any, label: str | None, cursor: str | None, limit: int | None) -> Call[m.Page[m.Job]]:
    params = _params(state=state, label=label, cursor=cursor, limit=limit)
    return Call("GET", "/v1/jobs", _model(m.Page[m.Job]), params=params)


def get_job(job_id: uuid.UUID | str) -> Call[m.Job]:
    return Call("GET", f"/v1/jobs/{_id(job_id)}", _model(m.Job))


def update_job(job_id: uuid.UUID | str, patch: m.JobPatch, version: int, key: str | None) -> Call[m.Job]:
    return _mutation("PATCH", f"/v1/jobs/{_id(job_id)}", _model(m.Job), body=patch, key=key,
                     headers={"If-Match": f'"{version}"'})  # fmt: skip


def delete_job(job_id: uuid.UUID | str, version: int | None, key: str | None) -> Call[None]:
    headers = {} if version is None else {"If-Match": f'"{version}"'}
    return _mutation("DELETE", f"/v1/jobs/{_id(job_id)}", _nothing, key=key, headers=headers)


def list_runs(
    job_id: uuid.UUID | str, status: Any, cursor: str | None, limit: int | None
) -> Call[m.Page[m.RunSummary]]:
    params = _params(status=status, cursor=cursor, limit=limit)
    return Call("GET", f"/v1/jobs/{_id(job_id)}/runs", _model(m.Page[m.RunSummary]), params=params)


def preview_job(job_id: uuid.UUID | str, count: int) -> Call[list[m.Fire]]:
    decode = _model(m.Preview)
    return Call("GET", f"/v1/jobs/{_id(job_id)}/preview", lambda r: decode(r).fires, params=_params(count=count))


def preview_schedule(schedule: m.Schedule, count: int) -> Call[list[m.Fire]]:
    """Not a change (nothing is stored), so no Idempotency-Key."""
    decode = _model(m.Preview)
    body = m.to_json(m.SchedulePreview(schedule=schedule, count=count))
    return Call("POST", "/v1/schedules/preview", lambda r: decode(r).fires, body=body, headers={"Content-Type": JSON})


def due_counts(resolution: str) -> Call[m.DueCounts]:
    return Call("GET", "/v1/due-counts", _model(m.DueCounts), params=_params(resolution=resolution))


def get_run(run_id: uuid.UUID | str) -> Call[m.Run]:
    return Call("GET", f"/v1/runs/{_id(run_id)}", _model(m.Run))


def heartbeat(run_id: uuid.UUID | str, body: m.Heartbeat, key: str | None) -> Call[m.Lease]:
    return _mutation("POST", f"/v1/runs/{_id(run_id)}/heartbeat", _model(m.Lease), body=body, key=key)


def complete_run(run_id: uuid.UUID | str, body: m.Completion, key: str | None) -> Call[m.Completed]:
    return _mutation("POST", f"/v1/runs/{_id(run_id)}/complete", _model(m.Completed), body=body, key=key)


def list_dead_letters(
    job_id: uuid.UUID | str | None,
    target_host: str | None,
    since: datetime | None,
    until: datetime | None,
    cursor: str | None,
    limit: int | None,
) -> Call[m.Page[m.DeadLetter]]:
    params = _params(job_id=job_id, target_host=target_host, since=since, until=until, cursor=cursor, limit=limit)
    return Call("GET", "/v1/dead-letters", _model(m.Page[m.DeadLetter]), params=params)


def redrive(run_id: uuid.UUID | str, key: str | None) -> Call[m.Redriven]:
    return _mutation("POST", f"/v1/dead-letters/{_id(run_id)}/redrive", _model(m.Redriven), key=key)


def redrive_many(selection: m.RedriveFilter, key: str | None) -> Call[m.BulkRedrive]:
    _check_instants(selection)
    return _mutation("POST", "/v1/dead-letters/redrive", _model(m.BulkRedrive), body=selection, key=key)


def list_history(job_id: uuid.UUID | str, cursor: str | None, limit: int | None) -> Call[m.Page[m.JobChange]]:
    params = _params(cursor=cursor, limit=limit)
    return Call("GET", f"/v1/jobs/{_id(job_id)}/history", _model(m.Page[m.JobChange]), params=params)


def purge(run_id: uuid.UUID | str, key: str | None) -> Call[None]:
    return _mutation("DELETE", f"/v1/dead-letters/{_id(run_id)}", _nothing, key=key)


def purge_many(selection: m.RedriveFilter, key: str | None) -> Call[m.BulkPurge]:
    _check_instants(selection)
    return _mutation("POST", "/v1/dead-letters/purge", _model(m.BulkPurge), body=selection, key=key)


def _check_instants(selection: m.RedriveFilter) -> None:
    for name in ("since", "until"):
        at = getattr(selection, name)
        if at is not None:
            m.aware(at, name)


def put_job_by_name(name: str, spec: m.JobSpec, version: int | None, create_only: bool, key: str | None) -> Call[m.Job]:
    headers = {} if version is None else {"If-Match": f'"{version}"'}
    if create_only:
        headers["If-None-Match"] = "*"
    return _mutation("PUT", _named(name), _model(m.Job), body=spec, key=key, headers=headers)


def get_job_by_name(name: str) -> Call[m.Job]:
    return Call("GET", _named(name), _model(m.Job))


def update_job_by_name(name: str, patch: m.JobPatch, version: int, key: str | None) -> Call[m.Job]:
    return _mutation("PATCH", _named(name), _model(m.Job), body=patch, key=key, headers={"If-Match": f'"{version}"'})


def delete_job_by_name(name: str, version: int | None, key: str | None) -> Call[None]:
    headers = {} if version is None else {"If-Match": f'"{version}"'}
    return _mutation("DELETE", _named(name), _nothing, key=key, headers=headers)


def trigger_job(job_id: uuid.UUID | str, body: m.Trigger, key: str | None) -> Call[m.RequestedRun]:
    if body.at is not None:
        m.aware(body.at, "at")
    return _mutation("POST", f"/v1/jobs/{_id(job_id)}/trigger", _model(m.RequestedRun), body=body, key=key)


def skip_occurrences(job_id: uuid.UUID | str, body: m.Skip, version: int | None, key: str | None) -> Call[m.Job]:
    headers = {} if version is None else {"If-Match": f'"{version}"'}
    if body.occurrence is not None:
        m.aware(body.occurrence, "occurrence")
    return _mutation("POST", f"/v1/jobs/{_id(job_id)}/skip", _model(m.Job), body=body, key=key, headers=headers)


def pause_until(job_id: uuid.UUID | str, body: m.PauseUntil, version: int | None, key: str | None) -> Call[m.Job]:
    headers = {} if version is None else {"If-Match": f'"{version}"'}
    m.aware(body.until, "until")
    return _mutation("POST", f"/v1/jobs/{_id(job_id)}/pause", _model(m.Job), body=body, key=key, headers=headers)


def backfill(job_id: uuid.UUID | str, body: m.BackfillRange, key: str | None) -> Call[m.Backfill]:
    m.aware(body.start, "start")
    m.aware(body.end, "end")
    return _mutation("POST", f"/v1/jobs/{_id(job_id)}/backfill", _model(m.Backfill), body=body, key=key)


def _named(name: str) -> str:
    """The path of a job by name; a name with characters the API refuses never reaches the URL."""
    if not NAME.match(name):
        raise ValueError(f"{name!r} is not a job name (1 to 200 of A-Z a-z 0-9 . _ ~ -, starting alphanumeric)")
    return f"/v1/jobs/by-name/{name}"


def _id(value: uuid.UUID | str) -> str:
    """An id for a path: a UUID, so nothing else can be smuggled into the URL."""
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"{value!r} is not an id (a UUID)") from None
