"""Run-event notifications: the worker hands each recorded outcome to a Notifier, which sends the events the
job (or its tenant) asked for as signed Standard Webhooks calls, in the background, with its own retries.

Never blocking the run: `outcome` only decides (pure, tickwheel.core.notify) and puts a notice on a bounded
queue; a full queue drops the notice (counted as `dropped`), so a slow or dead notification URL costs a run
nothing. Calls go through the worker's HttpCaller, so the same egress policy applies. Each event has a stable
`webhook-id` (run, attempt, event), the same on every try, so receivers can dedupe. Delivery is at most the
configured tries and lives in memory: notices waiting when a worker stops are dropped (counted), which is why
the run history, not a notification, is the record of what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.messages import HttpTarget, RunEventData, RunEventMessage, encode
from tickwheel import metrics
from tickwheel.core.notify import Route, RunEvent, event_id, events_of, recovered, route_of
from tickwheel.core.retry import RetryPolicy, next_delay_s
from tickwheel.settings import NotifySettings
from tickwheel.signing import sign_headers
from tickwheel.store.ports import HistoryStore
from worker.context import RunContext
from worker.targets import HttpCaller

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Notice:
    """One recorded outcome whose events are to be sent."""

    route: Route
    events: tuple[RunEvent, ...]
    check_recovered: bool  # a first-attempt success: `recovered` if the job's previous run had failed
    data: RunEventData
    scheduled_at: datetime
    signing_secrets: tuple[str, ...]


def notice_of(
    ctx: RunContext, attempt: int, status: str, response_code: int | None, error: str | None
) -> Notice | None:
    """What to send for an outcome, or None when the job and its tenant want none of its events."""
    job_route = ctx.definition.notify
    route = route_of(
        job_route.url if job_route else None,
        job_route.events if job_route else None,
        ctx.tenant.notify_url,
        ctx.tenant.notify_events,
    )
    if route is None:
        return None
    events = tuple(e for e in events_of(status, attempt) if e in route.events)
    check = status == "SUCCEEDED" and attempt == 1 and RunEvent.RECOVERED in route.events
    if not events and not check:
        return None
    data = RunEventData(
        run_id=ctx.run.run_id,
        job_id=ctx.run.job_id,
        tenant_id=ctx.run.tenant_id,
        attempt=attempt,
        status=status,
        scheduled_at=ctx.scheduled_at.isoformat(),
        response_code=response_code,
        error=error,
    )
    return Notice(route, events, check, data, ctx.scheduled_at, ctx.tenant.signing_secrets)


class Notifier:
    """A bounded queue of notices and `settings.concurrency` senders; `start` before use, `stop` at shutdown."""

    def __init__(
        self,
        settings: NotifySettings,
        store: HistoryStore,
        http: HttpCaller,
        *,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.settings = settings
        self.store = store
        self.http = http
        self.clock = clock
        self.sleep = sleep
        self.backoff = RetryPolicy(settings.tries, settings.base_delay_s, settings.max_delay_s, None)
        self._queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=settings.queue_size)
        self._senders: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._senders = [
            asyncio.create_task(self._send_forever(), name=f"notify {n}") for n in range(self.settings.concurrency)
        ]

    async def stop(self) -> None:
        for task in self._senders:
            task.cancel()
        for task in self._senders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._senders = []
        while not self._queue.empty():
            notice = self._queue.get_nowait()
            for event in notice.events:
                metrics.notifications.labels(event.value, "dropped").inc()
        metrics.notification_queue.set(0)

    def outcome(
        self, ctx: RunContext, attempt: int, status: str, response_code: int | None = None, error: str | None = None
    ) -> None:
        """Hand over a recorded outcome; returns at once (never waits, never raises for the notice)."""
        notice = notice_of(ctx, attempt, status, response_code, error)
        if notice is None:
            return
        try:
            self._queue.put_nowait(notice)
        except asyncio.QueueFull:
            for event in notice.events:
                metrics.notifications.labels(event.value, "dropped").inc()
            log.warning("notification queue full; events dropped", extra=ctx.log)
            return
        metrics.notification_queue.set(self._queue.qsize())

    async def drain(self) -> None:
        """Wait until every handed-over notice was sent or given up (tests and orderly shutdowns)."""
        await self._queue.join()

    async def _send_forever(self) -> None:
        while True:
            notice = await self._queue.get()
            try:
                await self.send(notice)
            except Exception:  # a notification must never take its sender down
                log.exception("notification failed", extra={"run_id": str(notice.data.run_id)})
            finally:
                self._queue.task_done()
                metrics.notification_queue.set(self._queue.qsize())

    async def send(self, notice: Notice) -> None:
        events = list(notice.events)
        if notice.check_recovered and recovered(
            await self.store.previous_status(notice.data.job_id, notice.scheduled_at)
        ):
            events.append(RunEvent.RECOVERED)
        for event in events:
            await self.deliver(notice, event)

    async def deliver(self, notice: Notice, event: RunEvent) -> bool:
        """POST one event, tried up to `settings.tries` times with backoff; whether the URL took it (2xx)."""
        s = self.settings
        msg_id = event_id(str(notice.data.run_id), notice.data.attempt, event)
        target = HttpTarget(url=notice.route.url, timeout_s=s.timeout_s)
        extra = {"tenant": notice.data.tenant_id, "job_id": str(notice.data.job_id), "run_id": str(notice.data.run_id)}
        for attempt in range(1, s.tries + 1):
            message = RunEventMessage(type=f"run.{event.value}", timestamp=self.clock().isoformat(), data=notice.data)
            body = encode(message)
            stamp = int(self.clock().timestamp())
            headers = {"Content-Type": "application/json", **sign_headers(notice.signing_secrets, msg_id, stamp, body)}
            result = await self.http.call(target, body, headers)
            if result.status is not None and 200 <= result.status < 300:
                metrics.notifications.labels(event.value, "delivered").inc()
                return True
            if result.error in ("egress_denied", "invalid_target"):
                break  # refused by policy: another try cannot succeed
            if attempt < s.tries:
                metrics.notifications.labels(event.value, "retried").inc()
                await self.sleep(next_delay_s(self.backoff, attempt, rand=random.random()))
        metrics.notifications.labels(event.value, "failed").inc()
        log.warning("notification %s not delivered: %s %s", event.value, result.status, result.error or "", extra=extra)
        return False
