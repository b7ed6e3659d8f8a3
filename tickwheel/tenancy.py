"""A process's view of its tenants' rows: read at most once per TENANT_CACHE_S per tenant, shared by every run
that asks at the same moment (the worker's calls, and the run retention every writer of a run's rows needs)."""

from __future__ import annotations

import asyncio
import time

from tickwheel.core.retention import retention_s
from tickwheel.store.ports import TenantStore
from tickwheel.store.records import Tenant

TENANT_CACHE_S = 30.0


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

    async def run_retention_s(self, tenant_id: str, default_days: int) -> int:
        """How long the tenant's runs, attempts and history are kept past their due time, in seconds: its
        `retention_days`, else `default_days` (settings.retention.runs_days)."""
        return retention_s(default_days, (await self.get(tenant_id)).retention_days)

    async def _read(self, tenant_id: str) -> Tenant:
        return await self.store.call_settings(tenant_id)


def _ignore_failure(task: asyncio.Future[Tenant]) -> None:
    """A weight read that failed is tried again at the tenant's next turn; the run's own read will report it."""
    if not task.cancelled():
        task.exception()
