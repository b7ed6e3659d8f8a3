"""What stands in for Redis in one API process while Redis does not answer (Redis holds limits, not truth: a
check it cannot make fails open, bounded by these per-process counts; see api.quotas and api.auth)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from tickwheel import metrics
from tickwheel.flow.redis import AwayGate

log = logging.getLogger(__name__)

WARN_EVERY_S = 10.0  # one WARNING per check this often while Redis is away, not one per request


class LocalLimits:
    """What stands in for Redis in one API process while Redis does not answer: counts in fixed windows (the same
    windows the Redis keys use), the job counts read from Cassandra, and when each check last warned."""

    MAX_KEYS = 10_000

    def __init__(self) -> None:
        self._windows: dict[tuple[str, ...], tuple[int, int]] = {}  # name -> (window, count in it)
        self.job_counts: dict[str, tuple[int, float]] = {}  # tenant -> (jobs, read at, monotonic s)
        self._counting: dict[str, asyncio.Future[int]] = {}  # tenant -> its job count being read
        self._warned: dict[str, float] = {}
        self.away = AwayGate()

    async def count_once(self, tenant_id: str, read: Callable[[], Awaitable[int]]) -> int:
        """The tenant's job count from `read`, one read at a time per tenant: the requests that ask while it runs
        share its answer. Counting is a read of the tenant's whole listing; run 12 of the soak had every create of
        a tenant start one at once while Redis was away, and again when it came back without its counters, and
        those reads stalled the cluster (QUORUM reads timed out: 5 creates answered 503)."""
        pending = self._counting.get(tenant_id)
        if pending is None:
            pending = asyncio.ensure_future(read())
            self._counting[tenant_id] = pending
            pending.add_done_callback(lambda _: self._counting.pop(tenant_id, None))
        return await asyncio.shield(pending)  # one caller cancelled leaves the read to the others

    def ask_redis(self) -> None:
        """Raise RedisAway (one of REDIS_DOWN) while Redis failed to answer a moment ago (`AwayGate`)."""
        self.away.ask()

    def count(self, name: tuple[str, ...], window: int, units: int = 1) -> int:
        """Add `units` to `name`'s count in `window` (a new window starts from zero); the count after."""
        if len(self._windows) > self.MAX_KEYS:
            self._windows.clear()
        seen_window, used = self._windows.get(name, (window, 0))
        used = (used if seen_window == window else 0) + units
        self._windows[name] = (window, used)
        return used

    def peek(self, name: tuple[str, ...], window: int) -> int:
        """`name`'s count in `window` (0 when it has none there)."""
        seen_window, used = self._windows.get(name, (window, 0))
        return used if seen_window == window else 0

    def without_redis(self, check: str, exc: BaseException) -> None:
        """Count a check done without Redis, and warn (once per WARN_EVERY_S and check)."""
        metrics.redis_fail_open.labels(check).inc()
        self.away.failed(exc)
        now = time.monotonic()
        if now - self._warned.get(check, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[check] = now
            log.warning("Redis did not answer; %s checked in this process only (fails open): %s", check, exc)
