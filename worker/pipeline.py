"""One fired run, from the lane message to its recorded outcome: load, admit, claim, call, record.

    load    the run and its job; drop re-fired duplicates (final, or not at the expected attempt) and cancel runs
            whose job was paused, deleted or changed since the run was made. A once job's first attempt reads no
            job: its due row carries the definition, and its claim is refused if a change of the job has begun
            since the run was made (then the run starts again from a read of the job)
    admit   flow control in Redis (breaker, tenant and target caps, token bucket); refused -> deferred, no attempt
    claim   fenced conditional write (runnable at the expected attempt -> RUNNING, attempt + 1, lease)
    call    signed HTTP (egress policy) or Kafka
    record  SUCCEEDED | RETRY (new run row at retry_at) | DEAD (dead letter + alert), conditioned on the attempt

A lease check that fires while its attempt still runs past the lease times the run out into RETRY (or DEAD).

Asynchronous completion: a job with `asyncCompletion` whose target answers 202 is held RUNNING under a lease of
`leaseS` (never past the claim plus `maxLeaseS`); its target reports the outcome to the API, which fences it into
the run row (`runs.reported[attempt]`) and fires a lease check at once; the lease check finds the report and
records it here, through the same `record` as a synchronous call. No report and no heartbeat before the lease
ends: the lease check times the run out into its retry policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import msgspec

from schemas.messages import DueRun, HttpTarget, JobDefinition, RunKind, decode_definition, decode_report
from tickwheel import metrics
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.instants import epoch_ms, from_epoch_ms
from tickwheel.core.notify import MISSED
from tickwheel.core.retention import retention_s
from tickwheel.core.retry import Outcome, RetryDecision, RetryPolicy, decide, deferral_dead_reason
from tickwheel.errors import TickwheelError
from tickwheel.flow.limits import Caps, Denied, FlowLimits, Permit, tightened
from tickwheel.model import retry_policy_of
from tickwheel.settings import Settings
from tickwheel.store import buckets
from tickwheel.store.buckets import due_run_for
from tickwheel.store.ports import WorkerStore
from tickwheel.store.records import RUNNABLE, JobHead, JobState, NewRun, Run, RunStatus, Tenant
from tickwheel.store.runs import AttemptResult
from worker.context import RunContext, TenantCache
from worker.dead import DeadLetters
from worker.notify import Notifier
from worker.outcome import Verdict, answers_later, breaker_failure, judge, judge_report
from worker.requests import call_body, call_headers
from worker.targets import CallResult, HttpCaller, KafkaCaller

log = logging.getLogger(__name__)

RECORD_TRIES = 4  # at least, however the lease stands
RECORD_BACKOFF_MAX_S = 5.0

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Claimed(enum.Enum):
    """How a claim ended."""

    WON = "won"
    """RUNNING at the next attempt: call."""
    DROPPED = "dropped"
    """Not this message's to run (a duplicate, an attempt that lost, a run of a changed job cancelled)."""
    CHANGED = "changed"
    """A claim made without reading the job found a change of it begun since the run was made: read it, again."""


def carried_definition(due: DueRun) -> JobDefinition | None:
    """The job's definition a once job's first attempt carries (`runs.carries_definition`), or None: the worker then
    reads the job (a row that does not decode is read for too)."""
    if due.definition is None or due.kind != "run" or due.attempt != 0:
        return None
    try:
        return decode_definition(due.definition)
    except msgspec.DecodeError:
        log.warning("a due row's definition does not decode; reading the job", extra={"run_id": str(due.run_id)})
        return None


class RunHandler:
    """Handles DueRun messages of any lane; safe to run many at once."""

    def __init__(
        self,
        settings: Settings,
        store: WorkerStore,
        limits: FlowLimits | None,
        http: HttpCaller,
        kafka: KafkaCaller,
        worker_id: str,
        *,
        announcer: NearAnnouncer | None = None,
        notifier: Notifier | None = None,
        clock: Clock = utc_now,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.settings = settings
        self.store = store
        self.limits = limits
        self.http = http
        self.kafka = kafka
        self.worker_id = worker_id
        self.announcer = announcer
        self.notifier = notifier
        self.clock = clock
        self.rand = rand
        self.sleep = sleep
        self.tenants = TenantCache(store)
        self.dead = DeadLetters(store, http, settings.retention)
        # (run, attempt) this process is handling now: a second message for one of them (both dispatchers fired
        # the row across a take-over) is dropped here. Two claims of one run from one process carry the same
        # values when they start in the same millisecond; Cassandra answers one of the contended LWTs with a
        # timeout, and its settling SERIAL read finds the other's identical row and counts it as its own, so
        # both would call (run 11 of the soak: 5 duplicate calls 0-3 s apart after dispatcher pauses).
        self.in_hand: set[tuple[uuid.UUID, int]] = set()

    async def handle(self, due: DueRun) -> None:
        if due.kind == "lease_check":
            await self.check_lease(due)
        elif due.kind == "missed":
            await self.report_missed(due)
        else:
            await self.run(due)

    # --- kind = run -------------------------------------------------------------------------------------------

    async def run(self, due: DueRun) -> None:
        key = (due.run_id, due.attempt)
        if key in self.in_hand:
            log.debug("run %s attempt %s is already in hand here: a second message dropped", due.run_id, due.attempt)
            return
        self.in_hand.add(key)
        try:
            await self._run(due)
        finally:
            self.in_hand.discard(key)

    async def _run(self, due: DueRun, *, read_job: bool = False) -> None:
        ctx = await self.load(due, read_job=read_job)
        if ctx is None:
            return
        permit = await self.admit(ctx)
        if permit is None:
            return
        failed: bool | None = None
        claimed = Claimed.DROPPED
        try:
            started = self.clock()
            claimed = await self.claim(ctx, started)
            if claimed is not Claimed.WON:
                return
            result = await self.call(ctx, attempt=due.attempt + 1)
            held = answers_later(result, ctx.definition)
            verdict = judge(
                result, ctx.definition, retry_policy_of(ctx.definition), due.attempt + 1, ctx.scheduled_at,
                self.clock(), self.rand(),
            )  # fmt: skip
            failed = breaker_failure(result, verdict.outcome, ctx.definition)
        finally:
            if self.limits is not None and isinstance(permit, Permit):
                await asyncio.shield(self.limits.release(permit, failed, epoch_ms(self.clock())))
            if claimed is Claimed.CHANGED:  # the permit was for the run as fired: admitted again as the job is now
                await self._run(due, read_job=True)
        if held:
            await self.hold(ctx, due.attempt + 1, started)
        else:
            await self.record(ctx, due.attempt + 1, result, verdict, started)

    async def hold(self, ctx: RunContext, attempt: int, started: datetime) -> None:
        """The target answered 202: keep the run RUNNING under the job's asynchronous lease instead of the call's
        (fenced; a lease a heartbeat already moved is kept), until its report or its lease check."""
        completion = ctx.definition.async_completion
        assert completion is not None
        now = self.clock()
        lease_until = min(now + timedelta(seconds=completion.lease_s),
                          started + timedelta(seconds=completion.max_lease_s))  # fmt: skip
        claimed_until = started + timedelta(seconds=ctx.lease_s(self.settings.worker))  # as `claim` wrote it
        transition = await self.store.hold_lease(ctx.run, attempt, claimed_until, lease_until, now)
        if not transition.applied:
            log.info("held run no longer at attempt %s: %s", attempt, transition.found.status, extra=ctx.log)
            return
        metrics.async_completions.labels("held").inc()
        held_until = transition.lease_until
        assert held_until is not None  # an applied lease write tells the lease it left
        if self.announcer is not None and not self.announcer.rescan_finds(held_until, now):
            self.announce(ctx.run, attempt, "lease_check", held_until, now)

    async def load(self, due: DueRun, *, read_job: bool = False) -> RunContext | None:
        """The run's context, or None when its job is gone, paused or deleted (the run is then cancelled).

        The run row is not read: the claim's conditions (runnable, at the expected attempt, made for the job's
        current version) decide, and a claim that does not apply says why (`claim`). Nor is the job, for a once
        job's first attempt (unless `read_job`): its definition and version came with its due row, and its claim
        asks that no change of the job has begun since the run was made (`Claimed.CHANGED` otherwise)."""
        definition = None if read_job else carried_definition(due)
        if definition is not None:
            tenant = await self.tenants.get(due.tenant_id)
            run = dataclasses.replace(buckets.run_of_due(due), retention_s=self.run_retention_s(tenant))
            return RunContext(due, run, definition, tenant, unread=True)
        job = await self.store.read_state(due.job_id)
        tenant = await self.tenants.get(due.tenant_id)
        run = dataclasses.replace(buckets.run_of_due(due), retention_s=self.run_retention_s(tenant))
        if job is None or (job.state is not JobState.ACTIVE and not await self.forced_through_pause(due, job)):
            await self.cancel(run, "gone" if job is None else job.state.value.lower())
            return None
        run = dataclasses.replace(run, job_version=job.version)
        return RunContext(due, run, job.definition, tenant)

    def run_retention_s(self, tenant: Tenant) -> int:
        """How long the tenant's run rows are kept past their due time: every write of them carries it."""
        return retention_s(self.settings.retention.runs_days, tenant.retention_days)

    async def forced_through_pause(self, due: DueRun, job: JobHead) -> bool:
        """Whether a run of a PAUSED job is a forced trigger (POST .../trigger with force), which runs anyway; only
        then is the run row read, so a run of an ACTIVE job still costs no read of it."""
        if job.state is not JobState.PAUSED:
            return False
        found = await self.store.get_run(due.run_id)
        return found is not None and found.forced

    async def cancel(self, run: NewRun, why: str) -> None:
        if await self.store.cancel(run, self.clock()):
            metrics.claims.labels("cancelled").inc()
            log.info("run cancelled: its job is %s", why, extra=_extra(run))
        else:
            metrics.claims.labels("skipped").inc()

    async def admit(self, ctx: RunContext) -> Permit | bool | None:
        """A flow-control permit (True when limits are off), or None after deferring the run."""
        if self.limits is None:
            return True
        w = self.settings.worker
        target = ctx.definition.target
        own = target if isinstance(target, HttpTarget) else None
        caps = Caps(
            tenant_concurrency=ctx.tenant.concurrency or w.tenant_concurrency,
            target_concurrency=int(tightened(w.target_concurrency, own.max_concurrency if own else None)),
            target_rate_per_s=tightened(w.target_rate_per_s, own.rate_per_s if own else None),
            hold_s=ctx.lease_s(w),
        )
        granted = await self.limits.acquire(ctx.run.tenant_id, ctx.flow_key(), caps, epoch_ms(self.clock()))
        if isinstance(granted, Permit):
            return granted
        await self.defer(ctx, granted)
        return None

    async def defer(self, ctx: RunContext, denied: Denied) -> None:
        """Put the run back for later without spending an attempt; past its max age it goes DEAD instead."""
        now = self.clock()
        wait_s = max(denied.wait_s, self.settings.worker.defer_s) * (1.0 + 0.2 * self.rand())
        until = now + timedelta(seconds=wait_s)
        dead_reason = deferral_dead_reason(retry_policy_of(ctx.definition), ctx.scheduled_at, until)
        if dead_reason is not None:
            await self.give_up_deferred(ctx, denied, dead_reason, now)
            return
        await self.store.defer(ctx.run, ctx.due.attempt, until, denied.reason, now)
        self.announce(ctx.run, ctx.due.attempt, "run", until, now)
        metrics.deferrals.labels(denied.reason).inc()
        log.info("run deferred %.1f s: %s", wait_s, denied.reason, extra={**ctx.log, "attempt": ctx.due.attempt})

    async def give_up_deferred(self, ctx: RunContext, denied: Denied, dead_reason: str, now: datetime) -> None:
        """A run flow control kept back past its max age: claimed (fenced, like any attempt) and recorded DEAD
        with the reason, then dead-lettered and alerted through the ordinary path (a changed job: from its read)."""
        claimed = await self.claim(ctx, now)
        if claimed is Claimed.CHANGED:
            await self._run(ctx.due, read_job=True)
        if claimed is not Claimed.WON:
            return
        result = CallResult(now.timestamp(), now.timestamp(), error="deferred", detail=denied.reason)
        record = AttemptResult(RunStatus.DEAD, error=f"deferred: {denied.reason}; {dead_reason}")
        verdict = Verdict(Outcome.RETRY, RetryDecision(dead_reason=dead_reason), record)
        await self.record(ctx, ctx.due.attempt + 1, result, verdict, now)

    async def claim(self, ctx: RunContext, now: datetime) -> Claimed:
        """Fenced claim; a run made for an older version of its job is cancelled, a duplicate (final, running or
        re-fired) is dropped. A claim made without reading the job that finds its job changed since the run was made
        (marked, or at another version) is `Claimed.CHANGED`: the run is read for again, not cancelled."""
        lease_until = now + timedelta(seconds=ctx.lease_s(self.settings.worker))
        transition = await self.store.claim(
            ctx.run, ctx.due.attempt, self.worker_id, lease_until, now, unchanged=ctx.unread
        )
        if transition.applied:
            metrics.child(metrics.claims, "won").inc()
            if self.announcer is not None and not self.announcer.rescan_finds(lease_until, now):
                self.announce(ctx.run, ctx.due.attempt + 1, "lease_check", lease_until, now)
            return Claimed.WON
        found = transition.found
        changed = found.changed or found.job_version != ctx.run.job_version
        if ctx.unread and changed and found.status in RUNNABLE and found.attempt == ctx.due.attempt:
            metrics.claims.labels("reread").inc()
            return Claimed.CHANGED
        if found.status in RUNNABLE and found.job_version != ctx.run.job_version:
            await self.cancel(ctx.run, f"changed (version {ctx.run.job_version}, run made at {found.job_version})")
            return Claimed.DROPPED
        metrics.claims.labels("skipped" if found.attempt != ctx.due.attempt else "lost").inc()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("run not claimed at attempt %s: %s", ctx.due.attempt, found.status, extra=ctx.log)
        return Claimed.DROPPED

    async def call(self, ctx: RunContext, attempt: int) -> CallResult:
        lane = ctx.due.lane
        body = call_body(ctx, attempt)
        headers = call_headers(ctx, attempt, body, int(self.clock().timestamp()))
        if ctx.due.attempt == 0:  # the promise is about first calls; a retry is late by design
            start_lag = (self.clock() - ctx.scheduled_at).total_seconds()
            metrics.child(metrics.start_lag, lane).observe(max(0.0, start_lag))
        metrics.child(metrics.inflight, lane).inc()
        try:
            target = ctx.definition.target
            if isinstance(target, HttpTarget):
                result = await self.http.call(target, body, headers)
            else:
                key = (target.key or str(ctx.run.job_id)).encode()
                result = await self.kafka.call(target, ctx.tenant.topic_prefix, key, body, headers)
        except asyncio.CancelledError:
            await asyncio.shield(self.hand_back(ctx, attempt))
            raise
        finally:
            metrics.child(metrics.inflight, lane).dec()
        how = "http" if isinstance(target, HttpTarget) else "kafka"
        metrics.child(metrics.run_seconds, lane, how).observe(result.seconds)
        return result

    async def hand_back(self, ctx: RunContext, attempt: int) -> None:
        """The worker is stopping mid-call: give the run back now instead of waiting for its lease."""
        now = self.clock()
        result = AttemptResult(RunStatus.RETRY, error="worker stopped during the call", retry_at=now)
        if await self.store.finish(ctx.run, attempt, result, self.worker_id, now, now):
            self.announce(ctx.run, attempt, "run", now, now)
        log.warning("run handed back on shutdown", extra={**ctx.log, "attempt": attempt})

    async def record(
        self, ctx: RunContext, attempt: int, result: CallResult, verdict: Verdict, started: datetime
    ) -> None:
        recorded = await self.finish(ctx, attempt, verdict.record, started)
        if not recorded:
            metrics.runs_finished.labels(ctx.due.lane, "stale").inc()
            extra = {**ctx.log, "attempt": attempt}
            log.warning("outcome not recorded: attempt %s no longer holds the run", attempt, extra=extra)
            return
        status = verdict.record.status
        if verdict.record.retry_at is not None and status is RunStatus.RETRY:
            self.announce(ctx.run, attempt, "run", verdict.record.retry_at, self.clock())
        metrics.child(metrics.runs_finished, ctx.due.lane, status.value.lower()).inc()
        if log.isEnabledFor(logging.DEBUG):  # the ids' text is made only for a line that is written
            extra = {**ctx.log, "attempt": attempt}
            log.debug("run %s (%s)", status.value, verdict.record.error or result.status, extra=extra)
        if self.notifier is not None:
            self.notifier.outcome(ctx, attempt, status.value, verdict.record.response_code, verdict.record.error)
        if status is RunStatus.DEAD:
            await self.dead.add(ctx, verdict.record.error or "dead", self.clock())

    async def finish(self, ctx: RunContext, attempt: int, record: AttemptResult, started: datetime) -> bool:
        """`runs.finish`, tried again with backoff while Cassandra does not answer, until the claim's lease ends
        (and RECORD_TRIES times at least): the call was made, so its outcome must not be dropped for a timeout, nor
        left to the lease check, a lease later (a node's rejoin timed writes out for tens of seconds in the soak).
        An LWT that timed out may still have applied: `runs.finish` recognises its own write."""
        lease_until = started + timedelta(seconds=ctx.lease_s(self.settings.worker))  # the claim's, from `started`
        due = ctx.due
        fired_at = from_epoch_ms(due.fire_at_ms) if due.kind == "run" and due.attempt == attempt - 1 else None
        tries = 0
        while True:
            tries += 1
            try:
                return await self.store.finish(
                    ctx.run, attempt, record, self.worker_id, started, self.clock(), lease_until, fired_at
                )
            except TickwheelError as exc:
                if not exc.retriable or (tries >= RECORD_TRIES and self.clock() >= lease_until):
                    raise
                log.warning("recording the outcome failed (%s); trying again", exc.message, extra=ctx.log)
                await self.sleep(min(RECORD_BACKOFF_MAX_S, 0.2 * 2**tries))

    def announce(self, run: NewRun, attempt: int, kind: RunKind, fire_at: datetime, now: datetime) -> None:
        if self.announcer is not None:
            self.announcer.announce_if_near(due_run_for(run, attempt=attempt, kind=kind, fire_at=fire_at), now)

    # --- kind = missed ------------------------------------------------------------------------------------------

    async def report_missed(self, due: DueRun) -> None:
        """The reconciler found an occurrence of the job that never ran and could not repair it: a `missed` event
        to the job's (or its tenant's) notification route. Nothing is run or written."""
        job = await self.store.read_state(due.job_id) if self.notifier is not None else None
        if job is None or self.notifier is None:
            return
        ctx = RunContext(due, buckets.run_of_due(due), job.definition, await self.tenants.get(due.tenant_id))
        self.notifier.outcome(ctx, due.attempt, MISSED, None, f"missed: {due.missed_reason or 'unknown'}")

    # --- kind = lease_check -----------------------------------------------------------------------------------

    async def check_lease(self, due: DueRun) -> None:
        held = await self.store.get_run(due.run_id)
        now = self.clock()
        if held is None or held.status is not RunStatus.RUNNING or held.attempt != due.attempt:
            return
        report = held.report(due.attempt)
        if report is not None:
            await self.record_report(due, held, report)
            return
        if held.lease_until is not None and held.lease_until > now:
            return  # extended by a heartbeat; a later lease_check row covers the new lease
        tenant = await self.tenants.get(held.tenant_id)
        run = held.identity(self.run_retention_s(tenant))
        job = await self.store.read_state(run.job_id)
        retry_at = None
        if job is not None:
            policy = retry_policy_of(job.definition)
            decision = decide(policy, Outcome.RETRY, due.attempt, run.scheduled_at, now, self.rand())
            retry_at = decision.retry_at
        if not await self.store.expire_lease(run, due.attempt, retry_at, now):
            return
        metrics.lease_timeouts.inc()
        if retry_at is not None:
            self.announce(run, due.attempt, "run", retry_at, now)
        extra = {"tenant": run.tenant_id, "job_id": str(run.job_id), "run_id": str(run.run_id), "attempt": due.attempt}
        log.warning("lease expired; run %s", "retried" if retry_at else "dead", extra=extra)
        if job is None:
            return
        ctx = RunContext(due, run, job.definition, tenant)
        if self.notifier is not None:
            status = RunStatus.RETRY if retry_at else RunStatus.DEAD
            self.notifier.outcome(ctx, due.attempt, status.value, None, "lease expired")
        if retry_at is None:
            await self.dead.add(ctx, "lease expired; no attempt left", now)

    async def record_report(self, due: DueRun, held: Run, report_text: str) -> None:
        """Record an asynchronous run's reported outcome, as `run` records a call's (a job deleted meanwhile gets
        no retry)."""
        report = decode_report(report_text)
        tenant = await self.tenants.get(held.tenant_id)
        run = held.identity(self.run_retention_s(tenant))
        job = await self.store.read_state(run.job_id)
        now = self.clock()
        policy = RetryPolicy(max_attempts=due.attempt) if job is None else retry_policy_of(job.definition)
        verdict = judge_report(report, policy, due.attempt, run.scheduled_at, now, self.rand())
        started = held.started_at or now
        if job is None:
            if await self.store.finish(run, due.attempt, verdict.record, self.worker_id, started, now):
                metrics.async_completions.labels("recorded").inc()
            return
        ctx = RunContext(due, run, job.definition, tenant)
        result = CallResult(started.timestamp(), now.timestamp(), status=202, detail=report.detail)
        await self.record(ctx, due.attempt, result, verdict, started)
        metrics.async_completions.labels("recorded").inc()


def _extra(run: NewRun) -> dict[str, object]:
    return {"tenant": run.tenant_id, "job_id": str(run.job_id), "run_id": str(run.run_id)}
