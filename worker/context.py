"""What the worker reads before it may call a run's target: the run, its job and the job's tenant."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from yarl import URL

from schemas.messages import DueRun, HttpTarget, JobDefinition, KafkaTarget
from tickwheel.egress import canonical_authority, canonical_host
from tickwheel.settings import WorkerSettings
from tickwheel.store.ports import TenantStore
from tickwheel.store.records import NewRun, Tenant

TENANT_CACHE_S = 30.0


@dataclass(frozen=True, slots=True)
class RunContext:
    """One run about to be tried: everything the claim, the call and the outcome need."""

    due: DueRun
    run: NewRun
    definition: JobDefinition
    tenant: Tenant

    @property
    def log(self) -> dict[str, Any]:
        """The run's ids for a log record's `extra`."""
        return {"tenant": self.run.tenant_id, "job_id": str(self.run.job_id), "run_id": str(self.run.run_id)}

    @property
    def scheduled_at(self) -> datetime:
        return self.run.scheduled_at

    def target_host(self) -> str:
        """The flow-control and dead-letter key of the target: the URL's host in its one spelling
        (`canonical_host`), or the Kafka topic."""
        target = self.definition.target
        if isinstance(target, KafkaTarget):
            return f"kafka:{target.topic}"
        return canonical_host(URL(target.url).host or "-")

    def flow_key(self) -> str:
        """What breakers and limits are keyed by: the target's host and port (`canonical_authority`), or the
        Kafka topic."""
        target = self.definition.target
        if isinstance(target, KafkaTarget):
            return f"kafka:{target.topic}"
        return canonical_authority(target.url)

    def call_timeout_s(self, settings: WorkerSettings) -> float:
        target = self.definition.target
        return target.timeout_s if isinstance(target, HttpTarget) else 10.0

    def lease_s(self, settings: WorkerSettings) -> float:
        """How long a claim holds the run: long enough for the call, its timeout and recording the outcome."""
        return max(float(settings.lease_s), self.call_timeout_s(settings) + settings.lease_margin_s)


class TenantCache:
    """Tenant rows change rarely (secret rotation, caps); a short cache keeps them off the per-run path."""

    def __init__(self, store: TenantStore, ttl_s: float = TENANT_CACHE_S):
        self.store = store
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, asyncio.Future[Tenant]]] = {}

    async def get(self, tenant_id: str) -> Tenant:
        """The tenant, read at most once per `ttl_s` however many runs ask at the same moment."""
        cached = self._cache.get(tenant_id)
        if cached and time.monotonic() - cached[0] < self.ttl_s:
            return await asyncio.shield(cached[1])
        future = asyncio.ensure_future(self._read(tenant_id))
        self._cache[tenant_id] = (time.monotonic(), future)
        try:
            return await asyncio.shield(future)
        except BaseException:
            self._cache.pop(tenant_id, None)  # a failed read is not cached
            raise

    def weight_of(self, tenant_id: str) -> int:
        """The tenant's fair-share weight as cached, without waiting: 1 until its row has been read (the read is
        started here, so the next turn has it)."""
        cached = self._cache.get(tenant_id)
        if cached is None or time.monotonic() - cached[0] >= self.ttl_s:
            task = asyncio.ensure_future(self.get(tenant_id))
            task.add_done_callback(_ignore_failure)
            return 1
        future = cached[1]
        if future.done() and not future.cancelled() and future.exception() is None:
            return future.result().weight or 1
        return 1

    async def _read(self, tenant_id: str) -> Tenant:
        return await self.store.call_settings(tenant_id)


def _ignore_failure(task: asyncio.Future[Tenant]) -> None:
    """A weight read that failed is tried again at the tenant's next turn; the run's own read will report it."""
    if not task.cancelled():
        task.exception()
