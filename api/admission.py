"""Admission control of one API process (issue 19): a bounded number of requests worked on at once, a short wait
for a slot, and a 503 + Retry-After for the rest, answered before authentication, so before any Redis, Cassandra
or Kafka work (nothing half-written; an Idempotency-Key sent again later is as new). The decisions are
`tickwheel.core.admission`'s; this module holds the slots, the queue and the loop-lag probe.

The middleware runs inside `problems` (shed answers are counted in `tickwheel_api_requests_total`) and outside
`authenticate`. The probe routes (NEVER_SHED) pass untouched: an orchestrator must see an overloaded process as
alive, and its metrics are how anyone sees the overload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from tickwheel import metrics
from tickwheel.core.admission import (
    AdmissionPolicy,
    Delay,
    Load,
    ShedReason,
    Verdict,
    decide,
    observe,
    retry_after_s,
    wait_limit_s,
)
from tickwheel.settings import ApiSettings

from .problems import problem

log = logging.getLogger(__name__)

NEVER_SHED = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})
PROBE_EVERY_S = 0.1  # the loop-lag probe's period: ten timers a second cost nothing measurable
WARN_EVERY_S = 10.0  # one WARNING this often while shedding, not one per request


def policy_of(settings: ApiSettings) -> AdmissionPolicy:
    """The admission bounds the `api.*` settings give."""
    return AdmissionPolicy(
        max_in_flight=settings.max_in_flight,
        max_waiting=settings.max_waiting,
        wait_max_s=settings.wait_max_s,
        wait_target_s=settings.wait_target_s,
        interval_s=settings.overload_interval_s,
        lag_target_s=settings.lag_target_s,
        retry_after_s=settings.shed_retry_after_s,
    )


class Admission:
    """The slots, the queue of requests waiting for one, and the two delay signals of one API process."""

    def __init__(
        self,
        policy: AdmissionPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ):
        self.policy = policy
        self.in_flight = 0
        self.waiting = 0
        self.queue = Delay()
        self.lag = Delay()
        self._clock = clock
        self._jitter = jitter
        self._waiters: deque[asyncio.Future[bool]] = deque()  # FIFO; done ones (expired) are skipped
        self._warned_at = -WARN_EVERY_S

    @property
    def enabled(self) -> bool:
        return self.policy.max_in_flight > 0

    async def enter(self) -> ShedReason | None:
        """Take a slot (waiting for one if the policy says so), or the reason the request is shed."""
        now = self._clock()
        verdict, reason = decide(self.policy, Load(self.in_flight, self.waiting, self.queue, self.lag), now)
        if verdict is Verdict.SHED:
            return reason
        if verdict is Verdict.ADMIT:
            self.in_flight += 1
            self._waited(0.0, now)
            return None
        granted = await self._wait(wait_limit_s(self.policy, self.queue, now))
        done = self._clock()
        self._waited(done - now, done)
        return None if granted else ShedReason.WAITED

    def leave(self) -> None:
        """Give the slot back: to the first request still waiting, or to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._resolve(waiter, True)  # the slot passes to it as it is: in_flight does not change
                return
        self.in_flight -= 1
        metrics.api_in_flight.set(self.in_flight)

    def lag_sampled(self, lag_s: float) -> None:
        """Record one measurement of how late the event loop ran a timer."""
        metrics.api_loop_lag.set(lag_s)
        self.lag = observe(self.lag, lag_s, self.policy.lag_target_s, self._clock())

    def shed(self, reason: ShedReason, request: web.Request) -> web.Response:
        """The 503 answer of a shed request, counted (and logged once per WARN_EVERY_S)."""
        metrics.api_shed.labels(reason.value).inc()
        now = self._clock()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "overloaded: shedding requests (%s; %d in flight, %d waiting), e.g. %s %s",
                reason.value,
                self.in_flight,
                self.waiting,
                request.method,
                request.path,
            )
        return problem(
            503,
            "Overloaded",
            "this API process is at capacity and did not start on the request; nothing was done, try again later",
            retry_after_s=retry_after_s(self.policy, self._jitter()),
        )

    async def watch_lag(self, every_s: float = PROBE_EVERY_S) -> None:
        """Measure the event loop's lag every `every_s`, forever."""
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + every_s
            await asyncio.sleep(every_s)
            self.lag_sampled(max(0.0, loop.time() - expected))

    def _waited(self, waited_s: float, now: float) -> None:
        self.queue = observe(self.queue, waited_s, self.policy.wait_target_s, now)
        metrics.api_in_flight.set(self.in_flight)

    async def _wait(self, limit_s: float) -> bool:
        """Wait up to `limit_s` for a slot handed over by `leave`; whether one was."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()  # expired ones at the head: the queue's memory stays bounded
        self._waiters.append(waiter)
        self.waiting += 1
        metrics.api_waiting.set(self.waiting)
        timer = loop.call_later(limit_s, self._resolve, waiter, False)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():  # its request was cancelled (the client left, the server stops) while it waited
                self.waiting -= 1
                metrics.api_waiting.set(self.waiting)
            elif waiter.result():  # ...just as a slot was handed to it: hand it on, or it is lost
                self.leave()
            raise
        finally:
            timer.cancel()

    def _resolve(self, waiter: asyncio.Future[bool], granted: bool) -> None:
        """End a wait: `waiting` counts the waits not yet ended, so a slot freed meanwhile is not held for them."""
        if not waiter.done():
            waiter.set_result(granted)
            self.waiting -= 1
            metrics.api_waiting.set(self.waiting)


ADMISSION = web.AppKey("admission", Admission)


@web.middleware
async def admission(request: web.Request, handler: Handler) -> web.StreamResponse:
    gate = request.app[ADMISSION]
    if not gate.enabled or request.path in NEVER_SHED:
        return await handler(request)
    reason = await gate.enter()
    if reason is not None:
        return gate.shed(reason, request)
    try:
        return await handler(request)
    finally:
        gate.leave()


async def lag_probe(app: web.Application) -> AsyncIterator[None]:
    """The app's cleanup context: the loop-lag probe runs while the app does."""
    gate = app[ADMISSION]
    task = asyncio.create_task(gate.watch_lag()) if gate.enabled and gate.policy.lag_target_s > 0 else None
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
