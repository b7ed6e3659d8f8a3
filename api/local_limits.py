"""What stands in for Redis in one API process while Redis does not answer (Redis holds limits, not truth: a
check it cannot make fails open, bounded by these per-process counts; see api.quotas and api.auth)."""

from __future__ import annotations

import logging
import time

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
        self._warned: dict[str, float] = {}
        self.away = AwayGate()

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
