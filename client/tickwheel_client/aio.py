"""`AsyncClient`: the job API for asyncio, method for method the same as `Client` (sync.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx

from . import models as m
from . import operations as ops
from ._shared import answer_pause_s, http_options, model_of, resolve
from .config import Config
from .errors import ConnectionFailed
from .retry import DEFAULT_RETRIES, Retries, pause_s

T = TypeVar("T")
Id = uuid.UUID | str


class AsyncClient:
    """The tenant's view of the job API. Mutations carry an Idempotency-Key and are retried with it."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        api_url: str | None = None,
        api_key: str | None = None,
        profile: str | None = None,
        retries: Retries = DEFAULT_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = resolve(config, api_url, api_key, profile)
        self._retries = retries
        self._sleep = sleep
        self._http = httpx.AsyncClient(transport=transport, **http_options(self.config))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, call: ops.Call[T]) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.send(call.build(self._http))
            except httpx.TransportError as exc:
                delay = pause_s(self._retries, attempt, None)
                if delay is None:
                    raise ConnectionFailed(f"{call.method} {call.path}: {type(exc).__name__}: {exc}") from exc
            else:
                delay = answer_pause_s(response, self._retries, attempt)
                if delay is None:
                    return ops.finish(call, response)
            await self._sleep(delay)

    async def _pages(self, page: Callable[[str | None], ops.Call[m.Page[T]]]) -> AsyncIterator[T]:
        cursor: str | None = None
        while True:
            got = await self._send(page(cursor))
            for item in got.items:
                yield item
            if not got.next_cursor:
                return
            cursor = got.next_cursor

    async def health(self) -> dict[str, Any]:
        """GET /healthz: the API process is alive."""
        return await self._send(ops.health())

    async def ready(self) -> dict[str, Any]:
        """GET /readyz: Cassandra and Kafka answer (Unavailable otherwise)."""
        return await self._send(ops.ready())

    async def metrics(self) -> str:
        """GET /metrics: the Prometheus text."""
        return await self._send(ops.metrics())

    async def openapi(self) -> dict[str, Any]:
        """GET /v1/openapi.json: the API's own description."""
        return await self._send(ops.openapi())

    async def create_job(
        self, spec: m.JobSpec | None = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> m.Job:
        """Create a job from a JobSpec or its fields (schedule=, target=, payload=, ...)."""
        return await self._send(ops.create_job(model_of(m.JobSpec, spec, fields), idempotency_key))

    async def create_jobs(self, specs: Sequence[m.JobSpec], /, *, idempotency_key: str | None = None) -> m.BatchResult:
        """Create up to 500 jobs in one request; each item has its own status (a whole batch under one key)."""
        return await self._send(ops.create_jobs(m.JobBatch(jobs=list(specs)), idempotency_key))

    def list_jobs(
        self, *, state: m.JobState | str | None = None, label: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[m.Job]:
        """Every job (optionally by state, or `label="k=v"`), following next_cursor page after page."""
        return self._pages(lambda cursor: ops.list_jobs(state, label, cursor, page_size))

    async def get_job(self, job_id: Id) -> m.Job:
        """One job, with its last run."""
        return await self._send(ops.get_job(job_id))

    async def update_job(
        self,
        job_id: Id,
        patch: m.JobPatch | None = None,
        /,
        *,
        version: int | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.Job:
        """Change a job (If-Match: `version`, else the version read just before); fields left out are kept."""
        if version is None:
            version = (await self.get_job(job_id)).version
        return await self._send(ops.update_job(job_id, model_of(m.JobPatch, patch, fields), version, idempotency_key))

    async def pause_job(self, job_id: Id, *, version: int | None = None, idempotency_key: str | None = None) -> m.Job:
        """Pause: its scheduled run is cancelled, nothing fires until it is resumed."""
        return await self.update_job(job_id, m.JobPatch(state=m.JobState.PAUSED), version=version,
                               idempotency_key=idempotency_key)  # fmt: skip

    async def resume_job(self, job_id: Id, *, version: int | None = None, idempotency_key: str | None = None) -> m.Job:
        """Resume: the next occurrence from now (or, with catch-up `all`, the oldest one missed)."""
        return await self.update_job(job_id, m.JobPatch(state=m.JobState.ACTIVE), version=version,
                               idempotency_key=idempotency_key)  # fmt: skip

    async def delete_job(self, job_id: Id, *, version: int | None = None, idempotency_key: str | None = None) -> None:
        """Soft delete (If-Match `version` when given); deleting a deleted job succeeds."""
        await self._send(ops.delete_job(job_id, version, idempotency_key))

    async def preview_job(self, job_id: Id, count: int = 10) -> list[m.Fire]:
        """The next `count` fire times, in UTC and in the schedule's zone."""
        return await self._send(ops.preview_job(job_id, count))

    async def preview_schedule(self, schedule: m.Schedule, count: int = 10) -> list[m.Fire]:
        """The next `count` fires of a schedule not saved yet, checked as a create would check it."""
        return await self._send(ops.preview_schedule(schedule, count))

    async def due_counts(self, resolution: str = "minute") -> m.DueCounts:
        """Runs due per minute over the next 2 hours (`minute`) or per hour over the next 7 days (`hour`)."""
        return await self._send(ops.due_counts(resolution))

    def list_runs(
        self, job_id: Id, *, status: m.RunStatus | str | None = None, page_size: int | None = None
    ) -> AsyncIterator[m.RunSummary]:
        """A job's runs, newest first, following next_cursor."""
        return self._pages(lambda cursor: ops.list_runs(job_id, status, cursor, page_size))

    async def get_run(self, run_id: Id) -> m.Run:
        """One run with its attempts."""
        return await self._send(ops.get_run(run_id))

    async def heartbeat(
        self, run_id: Id, attempt: int, *, extend_by_s: int | None = None, idempotency_key: str | None = None
    ) -> m.Lease:
        """Extend the lease of a long call that `attempt` is making."""
        body = m.Heartbeat(attempt=attempt, extend_by_s=extend_by_s)
        return await self._send(ops.heartbeat(run_id, body, idempotency_key))

    async def complete_run(
        self,
        run_id: Id,
        attempt: int,
        outcome: m.CompletionOutcome | str,
        *,
        detail: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.Completed:
        """Report the outcome of an asynchronous run's `attempt` (its target answered 202)."""
        body = m.Completion(attempt=attempt, outcome=m.CompletionOutcome(outcome), detail=detail)
        return await self._send(ops.complete_run(run_id, body, idempotency_key))

    def list_dead_letters(
        self,
        *,
        job_id: Id | None = None,
        target_host: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.DeadLetter]:
        """Dead letters, newest first, following next_cursor."""
        return self._pages(lambda cursor: ops.list_dead_letters(job_id, target_host, since, until, cursor, page_size))

    async def redrive(self, run_id: Id, *, idempotency_key: str | None = None) -> m.Redriven:
        """One more attempt of a dead run, now."""
        return await self._send(ops.redrive(run_id, idempotency_key))

    async def redrive_many(
        self,
        *,
        job_id: Id | None = None,
        target_host: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        dry_run: bool = False,
        limit: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.BulkRedrive:
        """Redrive the dead letters matching the filter (with dry_run, only say which)."""
        selection = m.RedriveFilter.matching(job_id, target_host, since, until, dry_run, limit)
        return await self._send(ops.redrive_many(selection, idempotency_key))

    async def put_job_by_name(
        self,
        name: str,
        spec: m.JobSpec | None = None,
        /,
        *,
        version: int | None = None,
        create_only: bool = False,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.Job:
        """Create or replace the job called `name` (If-Match `version` when given; `create_only`: If-None-Match: *).
        The same definition again changes nothing."""
        spec = model_of(m.JobSpec, spec, fields)
        return await self._send(ops.put_job_by_name(name, spec, version, create_only, idempotency_key))

    async def get_job_by_name(self, name: str) -> m.Job:
        """The job called `name`."""
        return await self._send(ops.get_job_by_name(name))

    async def update_job_by_name(
        self,
        name: str,
        patch: m.JobPatch | None = None,
        /,
        *,
        version: int | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.Job:
        """Change the job called `name` (If-Match: `version`, else the version read just before)."""
        if version is None:
            version = (await self.get_job_by_name(name)).version
        patch = model_of(m.JobPatch, patch, fields)
        return await self._send(ops.update_job_by_name(name, patch, version, idempotency_key))

    async def delete_job_by_name(
        self, name: str, *, version: int | None = None, idempotency_key: str | None = None
    ) -> None:
        """Soft delete the job called `name`; a later put_job_by_name makes a new job under the name."""
        await self._send(ops.delete_job_by_name(name, version, idempotency_key))

    async def trigger_job(
        self, job_id: Id, *, at: datetime | None = None, force: bool = False, idempotency_key: str | None = None
    ) -> m.RequestedRun:
        """One extra run now (or at `at`), outside the schedule; `force` runs it even if the job is paused."""
        return await self._send(ops.trigger_job(job_id, m.Trigger(at=at, force=force), idempotency_key))

    async def skip_occurrences(
        self,
        job_id: Id,
        *,
        count: int | None = None,
        occurrence: datetime | None = None,
        version: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.Job:
        """Skip the next `count` occurrences, or one `occurrence`, without changing the expression."""
        body = m.Skip(count=count, occurrence=occurrence)
        return await self._send(ops.skip_occurrences(job_id, body, version, idempotency_key))

    async def pause_until(
        self, job_id: Id, until: datetime, *, version: int | None = None, idempotency_key: str | None = None
    ) -> m.Job:
        """Nothing fires before `until`; the job goes on by itself afterwards (with its catch-up policy)."""
        return await self._send(ops.pause_until(job_id, m.PauseUntil(until=until), version, idempotency_key))

    async def backfill(
        self,
        job_id: Id,
        start: datetime,
        end: datetime,
        *,
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> m.Backfill:
        """Make now the runs the schedule would have made in [start, end) (at most 1000; dry_run: only list them)."""
        body = m.BackfillRange(start=start, end=end, dry_run=dry_run)
        return await self._send(ops.backfill(job_id, body, idempotency_key))
    def list_history(self, job_id: Id, *, page_size: int | None = None) -> AsyncIterator[m.JobChange]:
        """The job's audit log, newest first, following next_cursor."""
        return self._pages(lambda cursor: ops.list_history(job_id, cursor, page_size))

    async def purge(self, run_id: Id, *, idempotency_key: str | None = None) -> None:
        """Delete one dead letter (the run and its history stay)."""
        await self._send(ops.purge(run_id, idempotency_key))

    async def purge_many(
        self,
        *,
        job_id: Id | None = None,
        target_host: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        dry_run: bool = False,
        limit: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.BulkPurge:
        """Delete the dead letters matching the filter, redriven or not (with dry_run, only say which)."""
        selection = m.RedriveFilter.matching(job_id, target_host, since, until, dry_run, limit)
        return await self._send(ops.purge_many(selection, idempotency_key))
