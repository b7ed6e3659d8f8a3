"""Dead runs: the dead-letter row (payload, last error, every attempt) and a signed alert to the job's owner."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from schemas.messages import HttpTarget, OwnerAlert, encode
from tickwheel import metrics
from tickwheel.core.retention import retention_s
from tickwheel.settings import RetentionSettings
from tickwheel.signing import sign_headers
from tickwheel.store.ports import WorkerStore
from tickwheel.store.records import DeadLetter
from worker.context import RunContext
from worker.outcome import body_of
from worker.targets import HttpCaller

log = logging.getLogger(__name__)

ALERT_TIMEOUT_S = 10.0


class DeadLetters:
    def __init__(self, store: WorkerStore, http: HttpCaller, retention: RetentionSettings):
        self.store = store
        self.http = http
        self.retention = retention

    async def add(self, ctx: RunContext, last_error: str, now: datetime) -> None:
        """Write the run's dead letter (with every attempt so far), count it, and alert the owner if asked."""
        attempts = [attempt.as_json() for attempt in await self.store.get_attempts(ctx.run.run_id)]
        run = ctx.run
        letter = DeadLetter(
            run.tenant_id, now, run.run_id, run.job_id, ctx.target_host(), body_of(ctx.definition), last_error,
            tuple(attempts),
        )  # fmt: skip
        ttl_s = retention_s(self.retention.dead_letters_days, ctx.tenant.retention_days)
        await self.store.add_dead_letter(letter, ttl_s, run.retention_s)
        metrics.dead_letters.labels(_reason(last_error)).inc()
        if ctx.definition.alert_url:
            await self.alert(ctx, len([a for a in attempts if a.get("kind") != "deferred"]), last_error, now)

    async def alert(self, ctx: RunContext, attempts: int, last_error: str, now: datetime) -> None:
        """Best effort: POST a signed OwnerAlert to the job's alert_url (same egress policy as any target)."""
        alert = OwnerAlert(
            type="run.dead",
            run_id=ctx.run.run_id,
            job_id=ctx.run.job_id,
            tenant_id=ctx.run.tenant_id,
            attempts=attempts,
            last_error=last_error,
            dead_at=now.isoformat(),
        )
        body = encode(alert)
        headers = {
            "Content-Type": "application/json",
            **sign_headers(ctx.tenant.signing_secrets, f"alert_{ctx.run.run_id}", int(time.time()), body),
        }
        target = HttpTarget(url=ctx.definition.alert_url or "", timeout_s=ALERT_TIMEOUT_S)
        result = await self.http.call(target, body, headers)
        extra = {**ctx.log}
        if result.status is not None and 200 <= result.status < 300:
            log.info("dead-run alert delivered to the owner", extra=extra)
        else:
            log.warning("dead-run alert not delivered: %s %s", result.status, result.detail or "", extra=extra)


def _reason(last_error: str) -> str:
    if "max_attempts" in last_error or "gave up" in last_error:
        return "attempts"
    if "max_age" in last_error:
        return "age"
    if "lease" in last_error:
        return "lease"
    return "permanent"
