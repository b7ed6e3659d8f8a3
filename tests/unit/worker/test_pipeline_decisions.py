"""The worker pipeline's decisions against the in-memory store and bus (no servers): a duplicate is dropped, a
run of a changed or paused job is cancelled, flow control defers without spending an attempt, a failed call is
retried then dead-lettered, a lapsed lease times out, and an attempt that lost the run records nothing."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import cast

from schemas.messages import (
    AsyncCompletionDoc,
    CompletionReport,
    DueRun,
    HttpTarget,
    RetryDoc,
    encode,
    topic_names,
)
from tests.factories import definition, job
from tickwheel.bus.memory import MemoryBus
from tickwheel.bus.near import NearAnnouncer
from tickwheel.flow.limits import Caps, Denied, FlowLimits, Permit
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.memory import MemoryStore, stored
from tickwheel.store.records import JobState, NewRun, RunStatus, Tenant, Transition
from worker.pipeline import RunHandler
from worker.targets import CallResult, HttpCaller, KafkaCaller

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
TENANT = "t"


class Target:
    """A target answering each call with the next status of `statuses` (200 once they run out)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.calls = 0

    async def call(self, target: HttpTarget, body: bytes, headers: Mapping[str, str]) -> CallResult:
        self.calls += 1
        status = self.statuses.pop(0) if self.statuses else 200
        return CallResult(0.0, 0.01, status=status, excerpt=b"ok")


class Limits:
    """Flow control that refuses every call with `denied` (None: grants them all)."""

    def __init__(self, denied: Denied | None = None) -> None:
        self.denied = denied

    async def acquire(self, tenant: str, host: str, caps: Caps, now_ms: int) -> Permit | Denied:
        return self.denied or Permit("token", tenant, host, probe=False)

    async def release(self, permit: Permit, failed: bool | None, now_ms: int) -> str:
        return "ok"


class Scene:
    """One store, one bus and handlers over them, at a fixed clock."""

    def __init__(self, target: Target | None = None, limits: Limits | None = None) -> None:
        self.settings = Settings()
        self.store = MemoryStore()
        self.store.tenants[TENANT] = Tenant(TENANT, "tenant", NOW, ("whsec_dGVzdA==",))
        self.bus = MemoryBus()
        self.target = target or Target()
        self.now = NOW
        self.announcer = NearAnnouncer(self.settings, self.bus)
        self.limits = limits

    def handler(self, worker: str = "w1") -> RunHandler:
        return RunHandler(
            self.settings, self.store, cast(FlowLimits, self.limits), cast(HttpCaller, self.target),
            cast(KafkaCaller, None), worker, announcer=self.announcer, clock=lambda: self.now, rand=lambda: 0.5,
        )  # fmt: skip

    async def due_run(self, *, max_attempts: int = 5, state: JobState = JobState.ACTIVE, **run: object) -> NewRun:
        spec = definition(anchor=NOW, retry_policy=RetryDoc(max_attempts=max_attempts, base_delay_s=2, jitter=0))
        made, first = job(NOW, tenant_id=TENANT, job_definition=spec)
        first = dataclasses.replace(first, **run)  # type: ignore[arg-type]
        await self.store.create_job(dataclasses.replace(made, state=state), first, NOW)
        return first

    def status(self, run: NewRun) -> tuple[RunStatus, int]:
        stored = self.store.runs[run.run_id]
        return stored.status, stored.attempt


async def test_a_due_run_is_called_once_and_recorded() -> None:
    scene = Scene()
    run = await scene.due_run()
    await scene.handler().handle(due_run_for(run))
    assert scene.status(run) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1
    attempts = await scene.store.get_attempts(run.run_id)
    assert [(a.attempt, a.kind, a.outcome, a.response_code) for a in attempts] == [(1, "call", "SUCCEEDED", 200)]
    rows = await scene.store.read_range(run.shard, NOW - timedelta(minutes=1), NOW + timedelta(minutes=5))
    assert [r for r in rows if r.run_id == run.run_id] == [], "the row it was fired from and its lease check are gone"


async def test_a_refired_row_is_dropped_without_a_call() -> None:
    scene = Scene()
    run = await scene.due_run()
    await scene.handler().handle(due_run_for(run))
    await scene.handler("w2").handle(due_run_for(run))  # the same row fired again (a new owner's grace)
    assert scene.status(run) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1


async def test_two_workers_given_the_same_row_call_the_target_once() -> None:
    scene = Scene()
    run = await scene.due_run()
    await asyncio.gather(scene.handler("w1").handle(due_run_for(run)), scene.handler("w2").handle(due_run_for(run)))
    assert scene.status(run) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1


class SlowTarget(Target):
    """A target that takes a moment to answer: the first call is still in flight when the second claim settles."""

    async def call(self, target: HttpTarget, body: bytes, headers: Mapping[str, str]) -> CallResult:
        await asyncio.sleep(0.05)
        return await super().call(target, body, headers)


class SettlingStore(MemoryStore):
    """The Cassandra adapter's claim under contention: a claim whose LWT timed out is settled by a SERIAL read of
    the row, and a row that holds exactly the values it wrote counts as its own (store.retries `LwtIntent.shows`)."""

    async def claim(
        self,
        run: NewRun,
        expected_attempt: int,
        worker: str,
        lease_until: datetime,
        now: datetime,
        *,
        unchanged: bool = False,
    ) -> Transition:
        await asyncio.sleep(0)  # both claims are in flight together
        transition = await super().claim(run, expected_attempt, worker, lease_until, now, unchanged=unchanged)
        if transition.applied:
            return transition
        row = self.runs[run.run_id]
        mine = (RunStatus.RUNNING, expected_attempt + 1, worker, stored(lease_until), stored(now))
        return (
            Transition(True)
            if (row.status, row.attempt, row.worker, row.lease_until, row.started_at) == mine
            else transition
        )


async def test_one_process_given_the_same_row_twice_at_once_calls_the_target_once() -> None:
    """Run 11 of the soak: both dispatchers fired a row across a take-over, one worker took both messages in the
    same millisecond, and the settled claim let both call."""
    scene = Scene(SlowTarget())
    scene.store = SettlingStore()
    scene.store.tenants[TENANT] = Tenant(TENANT, "tenant", NOW, ("whsec_dGVzdA==",))
    run = await scene.due_run()
    handler = scene.handler()
    await asyncio.gather(handler.handle(due_run_for(run)), handler.handle(due_run_for(run)))
    assert scene.status(run) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1
    await handler.handle(due_run_for(run))  # once it is done, the same row again is dropped by the store
    assert scene.target.calls == 1 and not handler.in_hand


async def test_a_run_made_for_an_older_version_of_its_job_is_cancelled_not_called() -> None:
    scene = Scene()
    run = await scene.due_run()
    edited = scene.store.jobs[run.job_id]
    scene.store.jobs[run.job_id] = dataclasses.replace(edited, version=2)
    await scene.handler().handle(due_run_for(run))
    assert scene.status(run) == (RunStatus.CANCELLED, 0) and scene.target.calls == 0


async def test_a_run_of_a_paused_job_is_cancelled_unless_a_trigger_forced_it() -> None:
    scene = Scene()
    paused = await scene.due_run(state=JobState.PAUSED)
    await scene.handler().handle(due_run_for(paused))
    assert scene.status(paused) == (RunStatus.CANCELLED, 0)
    forced = await scene.due_run(state=JobState.PAUSED, origin="trigger", forced=True)
    await scene.handler().handle(due_run_for(forced))
    assert scene.status(forced) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1


async def test_a_run_flow_control_refuses_is_deferred_without_spending_an_attempt() -> None:
    scene = Scene(limits=Limits(Denied("target_rate", 3.0)))
    run = await scene.due_run()
    await scene.handler().handle(due_run_for(run))
    assert scene.status(run) == (RunStatus.SCHEDULED, 0) and scene.target.calls == 0
    assert [(a.kind, a.error) for a in await scene.store.get_attempts(run.run_id)] == [("deferred", "target_rate")]
    rows = await scene.store.read_range(run.shard, NOW, NOW + timedelta(minutes=1))
    assert [(r.attempt, r.kind) for r in rows if r.fire_at_ms > due_run_for(run).fire_at_ms] == [(0, "run")]
    announced = scene.bus.on(topic_names(scene.settings.kafka.topic_prefix)["near"])
    assert [(r.run_id, r.attempt) for r in announced] == [(run.run_id, 0)]


async def test_a_failed_call_is_retried_then_dead_lettered() -> None:
    scene = Scene(Target(503, 503))
    run = await scene.due_run(max_attempts=2)
    await scene.handler().handle(due_run_for(run))
    stored = scene.store.runs[run.run_id]
    assert (stored.status, stored.attempt, stored.last_error) == (RunStatus.RETRY, 1, "HTTP 503")
    assert stored.due_at is not None and stored.due_at > NOW
    retry = [
        r
        for r in await scene.store.read_range(run.shard, NOW, NOW + timedelta(minutes=5))
        if (r.attempt, r.kind) == (1, "run")
    ]
    assert [(r.kind, r.fire_at_ms) for r in retry] == [("run", due_run_for(run, fire_at=stored.due_at).fire_at_ms)]
    scene.now = stored.due_at
    await scene.handler().handle(retry[0])
    assert scene.status(run) == (RunStatus.DEAD, 2) and scene.target.calls == 2
    letter = scene.store.dead_letters[(TENANT, run.run_id)]
    assert [a["outcome"] for a in letter.attempts] == ["RETRY", "DEAD"]


async def test_a_lease_check_times_out_an_attempt_only_once_its_lease_has_passed() -> None:
    scene = Scene()
    run = await scene.due_run()
    lease_until = NOW + timedelta(seconds=30)
    assert (await scene.store.claim(run, 0, "gone", lease_until, NOW)).applied
    check: DueRun = due_run_for(run, attempt=1, kind="lease_check", fire_at=lease_until)
    await scene.handler().handle(check)
    assert scene.status(run) == (RunStatus.RUNNING, 1)  # the lease has not passed yet
    scene.now = lease_until + timedelta(seconds=1)
    await scene.handler().handle(check)
    stored = scene.store.runs[run.run_id]
    assert (stored.status, stored.attempt, stored.last_error) == (RunStatus.RETRY, 1, "lease expired")


async def test_an_attempt_that_lost_the_run_during_its_call_records_nothing() -> None:
    scene = Scene()
    run = await scene.due_run()

    class SlowTarget(Target):
        async def call(self, target: HttpTarget, body: bytes, headers: Mapping[str, str]) -> CallResult:
            late = NOW + timedelta(hours=1)  # the lease passed during the call, and another worker took the run
            assert await scene.store.expire_lease(run, 1, late, late)
            assert (await scene.store.claim(run, 1, "w2", late + timedelta(seconds=30), late)).applied
            return await super().call(target, body, headers)

    scene.target = SlowTarget()
    await scene.handler().handle(due_run_for(run))
    stored = scene.store.runs[run.run_id]
    assert (stored.status, stored.attempt, stored.worker) == (RunStatus.RUNNING, 2, "w2")
    assert [a.kind for a in await scene.store.get_attempts(run.run_id)] == ["lease_expired"]


async def test_a_202_holds_an_asynchronous_run_and_its_reported_outcome_is_recorded_at_its_lease_check() -> None:
    scene = Scene(Target(202))
    spec = definition(anchor=NOW, async_completion=AsyncCompletionDoc(lease_s=300, max_lease_s=900))
    made, run = job(NOW, tenant_id=TENANT, job_definition=spec)
    await scene.store.create_job(made, run, NOW)
    await scene.handler().handle(due_run_for(run))
    stored = scene.store.runs[run.run_id]
    assert (stored.status, stored.attempt, stored.lease_until) == (RunStatus.RUNNING, 1, NOW + timedelta(seconds=300))
    report = encode(CompletionReport("succeeded", "42 rows")).decode()
    assert (await scene.store.report_completion(run, 1, report, NOW)).applied
    await scene.handler().handle(due_run_for(run, attempt=1, kind="lease_check", fire_at=NOW))
    assert scene.status(run) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1
    attempts = await scene.store.get_attempts(run.run_id)
    assert [(a.outcome, a.response_excerpt) for a in attempts] == [("SUCCEEDED", "42 rows")]


async def test_what_the_worker_writes_of_a_run_is_kept_for_its_tenants_run_retention() -> None:
    scene = Scene(Target(503))
    scene.store.tenants[TENANT] = dataclasses.replace(scene.store.tenants[TENANT], retention_days=3)
    run = await scene.due_run(max_attempts=1)  # made with the default retention, as by another process
    await scene.handler().handle(due_run_for(run))
    assert scene.status(run) == (RunStatus.DEAD, 1)
    assert scene.store.kept_until[run.run_id] == NOW + timedelta(days=3), "the dead letter's dead_at, the last write"
    other = await scene.due_run()
    lease_until = NOW + timedelta(seconds=30)
    assert (await scene.store.claim(other, 0, "gone", lease_until, NOW)).applied
    scene.now = lease_until + timedelta(seconds=1)
    await scene.handler().handle(due_run_for(other, attempt=1, kind="lease_check", fire_at=lease_until))
    stored = scene.store.runs[other.run_id]
    assert stored.status is RunStatus.RETRY and stored.due_at is not None
    assert scene.store.kept_until[other.run_id] == stored.due_at + timedelta(days=3), "past its retry"
