"""The worker's guards on the real servers: egress refusal, breaker, tenant cap, Kafka targets, leases,
duplicates and jobs changed under their runs."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta
from typing import Any

import pytest

from schemas.messages import HttpTarget, KafkaTarget, RetryDoc, encode, topic_names, worker_group
from tests.integration.worker.conftest import Scene, eventually, now_utc
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, consumer_lag, ensure_topics
from tickwheel.egress import EgressPolicy, EgressResolver, canonical_authority
from tickwheel.errors import EgressRefused, Unavailable
from tickwheel.flow.limits import Caps, FlowLimits, Permit
from tickwheel.flow.redis import RedisClient
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tables import CassandraTables

ONE_TRY = RetryDoc(max_attempts=1)


@pytest.mark.parametrize("host", ["169.254.169.254", "0177.0.0.2", "10.0.0.1", "[::ffff:127.0.0.2]", "2130706434"])
async def test_a_private_target_is_refused_recorded_and_dead_lettered(scene: Scene, host: str) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=f"http://{host}:{scene.sink.port}/steal", timeout_s=2))
    row = await scene.wait_status(run.run_id, "DEAD")
    assert (row.last_error or "").startswith("egress_denied: target ")
    assert row.response_code is None
    letters = await eventually(
        lambda: scene.store.execute("SELECT run_id FROM dead_letters WHERE tenant_id = ?", [scene.tenant]), bool
    )
    assert letters == [{"run_id": run.run_id}]
    assert scene.sink.calls == []


async def test_a_name_resolving_to_loopback_is_refused_by_the_resolver_itself() -> None:
    resolver = EgressResolver(EgressPolicy())
    with pytest.raises(EgressRefused):
        await resolver.resolve("localhost", 80)
    allowed = await EgressResolver(EgressPolicy.from_cidrs(["127.0.0.0/8", "::1/128"])).resolve("localhost", 80)
    assert {r["host"] for r in allowed} <= {"127.0.0.1", "::1"} and allowed


async def test_the_breaker_opens_on_failures_defers_without_spending_an_attempt_and_a_probe_closes_it(
    scene: Scene,
) -> None:
    # Open for 6 s: the next run must reach the worker while it is open (a job written, fired, consumed and claimed),
    # seconds on a loaded box; arriving after, it would be the half-open probe and never deferred (was 1.5 s).
    await scene.worker(breaker_min_calls=4, breaker_window_s=10.0, breaker_open_s=6.0)
    failing = [await scene.job(HttpTarget(url=scene.sink.url("/down", status=503)), retry=ONE_TRY) for _ in range(4)]
    for run in failing:
        await scene.wait_status(run.run_id, "DEAD")
    limits = FlowLimits(scene.settings.worker, RedisClient(scene.settings.redis, prefix=f"{scene.tenant}:"))
    sink_target = canonical_authority(scene.sink.url("/"))  # breakers are per host and port
    assert await limits.breaker_open_until_ms(scene.tenant, sink_target) is not None
    held = await scene.job(HttpTarget(url=scene.sink.url("/up")))
    deferred = await eventually(
        lambda: runs.get_attempts(scene.store, held.run_id), lambda rows: any(r.kind == "deferred" for r in rows)
    )
    assert deferred[0].error == "breaker_open"
    assert deferred[0].attempt == 0  # no attempt spent
    row = await scene.wait_status(held.run_id, "SUCCEEDED")
    assert row.attempt == 1
    assert await limits.breaker_open_until_ms(scene.tenant, sink_target) is None
    assert len(scene.sink.calls_to("/up")) == 1
    await limits.redis.close()


async def test_the_tenant_concurrency_cap_holds_and_deferred_runs_still_complete(scene: Scene) -> None:
    await scene.store.execute("UPDATE tenants SET concurrency = 2 WHERE tenant_id = ?", [scene.tenant])
    await scene.worker()
    batch = [await scene.job(HttpTarget(url=scene.sink.url("/slow", delay_ms=600))) for _ in range(6)]
    for run in batch:
        await scene.wait_status(run.run_id, "SUCCEEDED", timeout_s=30)
    assert scene.sink.peak_concurrency("/slow") == 2
    assert len(scene.sink.calls_to("/slow")) == 6
    reasons = {a.error for run in batch for a in await runs.get_attempts(scene.store, run.run_id)}
    assert "tenant_concurrency" in reasons


async def test_a_kafka_target_receives_the_payload_with_the_run_id_and_foreign_topics_are_refused(scene: Scene) -> None:
    topic = f"{scene.tenant}.orders"
    await ensure_topics(scene.settings.kafka, {topic: 1})
    await scene.worker()
    run = await scene.job(KafkaTarget(topic=topic, key="order-1"), payload='{"order": 1}')
    await scene.wait_status(run.run_id, "SUCCEEDED")
    consumer = KafkaConsumer(scene.settings.kafka)
    await consumer.assign([(topic, 0, OFFSET_BEGINNING)])
    records = await eventually(lambda: consumer.poll(10, 0.5), bool)
    await consumer.close()
    [record] = records
    headers = dict(record.headers)
    assert (record.value, record.key) == (b'{"order": 1}', b"order-1")
    assert headers["Idempotency-Key"] == str(run.run_id).encode()
    assert headers["webhook-id"] == str(run.run_id).encode()
    foreign = await scene.job(KafkaTarget(topic="other-tenant.orders"))
    row = await scene.wait_status(foreign.run_id, "DEAD")
    assert (row.last_error or "").startswith("invalid_target: topic other-tenant.orders is outside")


async def test_an_expired_lease_retries_the_run_with_the_same_webhook_id(scene: Scene) -> None:
    run = await scene.job(HttpTarget(url=scene.sink.url("/after-lease")), at=now_utc() + timedelta(minutes=5))
    # A worker that claimed the run and vanished: RUNNING at attempt 1 with a lease of one second.
    claimed = await runs.claim(scene.store, run, 0, "ghost", now_utc() + timedelta(seconds=1), now_utc())
    assert claimed.applied
    await scene.worker()
    [call] = await scene.sink.wait_for("/after-lease", 1)
    row = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert call.header("webhook-id") == str(run.run_id)
    assert call.header("X-Tickwheel-Attempt") == "2"
    assert row.attempt == 2
    kinds = [(a.attempt, a.kind, a.outcome) for a in await runs.get_attempts(scene.store, run.run_id)]
    assert kinds == [(1, "lease_expired", "RETRY"), (2, "call", "SUCCEEDED")]


async def test_a_refired_duplicate_is_dropped_and_a_changed_job_cancels_its_run(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/once")))
    await scene.wait_status(run.run_id, "SUCCEEDED")
    first = next(d for d in scene.firer.fired if d.run_id == run.run_id)
    for _ in range(3):  # the dispatcher re-fires after a failover
        await scene.producer.send(topic_names(scene.settings.kafka.topic_prefix)["default"], encode(first))
    changed = await scene.job(HttpTarget(url=scene.sink.url("/changed")), at=now_utc() + timedelta(seconds=1))
    await scene.store.execute("UPDATE jobs SET version = 2 WHERE job_id = ?", [changed.job_id])
    paused = await scene.job(HttpTarget(url=scene.sink.url("/paused")), state="PAUSED")
    await scene.wait_status(changed.run_id, "CANCELLED")
    await scene.wait_status(paused.run_id, "CANCELLED")
    await asyncio.sleep(0.5)
    assert len(scene.sink.calls_to("/once")) == 1
    assert scene.sink.calls_to("/changed") == scene.sink.calls_to("/paused") == []


async def test_a_stopping_worker_finishes_what_it_holds_and_commits_it(scene: Scene) -> None:
    grace_s = 30.0  # far above what a loaded box needs to stop: only a stop that waits the grace out reaches it
    worker = await scene.worker(shutdown_grace_s=grace_s)
    run = await scene.job(HttpTarget(url=scene.sink.url("/drain", delay_ms=800)))
    await scene.sink.wait_arrived("/drain", 1, timeout_s=30)
    started = time.monotonic()
    await worker.stop()
    scene.workers.remove(worker)
    # Finished, not handed back (a call cut at the grace leaves the run RETRY), and not by waiting the grace out.
    assert time.monotonic() - started < grace_s
    assert (await scene.run_row(run.run_id)).status == "SUCCEEDED"
    assert len(scene.sink.calls_to("/drain")) == 1
    # Committed: the lane's group has nothing left to read (an uncommitted message goes to the next member).
    topic = topic_names(scene.settings.kafka.topic_prefix)["default"]
    group = worker_group(scene.settings.kafka.topic_prefix, "default")
    assert await consumer_lag(scene.settings.kafka, group, topic) == {0: 0}


async def test_a_worker_stopping_mid_call_hands_the_run_back_for_another_worker(scene: Scene) -> None:
    worker = await scene.worker(shutdown_grace_s=0.3)
    run = await scene.job(HttpTarget(url=scene.sink.url("/long", seq="200", delay_ms=3000), timeout_s=10))
    await scene.sink.wait_arrived("/long", 1, timeout_s=30)  # mid-call: claimed, and the target is answering
    await worker.stop()
    scene.workers.remove(worker)
    row = await scene.run_row(run.run_id)
    assert (row.status, row.attempt, row.last_error) == ("RETRY", 1, "worker stopped during the call")
    assert row.due_at is not None and row.due_at <= now_utc()
    await scene.worker()
    row = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert row.attempt == 2


async def test_a_jobs_own_target_cap_holds_for_its_calls(scene: Scene) -> None:
    await scene.worker()
    target = HttpTarget(url=scene.sink.url("/one-at-a-time", delay_ms=400), max_concurrency=1)
    batch = [await scene.job(target) for _ in range(3)]
    for run in batch:
        await scene.wait_status(run.run_id, "SUCCEEDED", timeout_s=30)
    assert scene.sink.peak_concurrency("/one-at-a-time") == 1
    reasons = {a.error for run in batch for a in await runs.get_attempts(scene.store, run.run_id)}
    assert "target_concurrency" in reasons


async def test_urgent_runs_do_not_wait_behind_a_full_default_lane(scene: Scene) -> None:
    await scene.worker(lanes=("urgent", "default"), concurrency_default=1)
    hold_s = 8.0  # the blocker holds the default lane's one slot this long: a loaded box's margin, not a bound
    blocker = await scene.job(HttpTarget(url=scene.sink.url("/bulk", delay_ms=int(hold_s * 1000)), timeout_s=20))
    [held] = await scene.sink.wait_arrived("/bulk", 1, timeout_s=30)
    queued = await scene.job(HttpTarget(url=scene.sink.url("/bulk")))
    urgent = await scene.job(HttpTarget(url=scene.sink.url("/urgent")), lane="urgent")
    [call] = await scene.sink.wait_for("/urgent", 1, timeout_s=30)
    # Ordering, not speed: the urgent call came while the default lane's slot was still taken (the blocker not
    # yet answered, the queued default run not yet started). An urgent run that waited for that slot arrives
    # only after the blocker's answer, however fast the box.
    assert call.received_at < held.received_at + hold_s, call.received_at - held.received_at
    assert [c.path for c in scene.sink.arrivals if c.received_at <= call.received_at] == ["/bulk", "/urgent"]
    await scene.wait_status(urgent.run_id, "SUCCEEDED")
    for run in (blocker, queued):
        await scene.wait_status(run.run_id, "SUCCEEDED", timeout_s=30)
    assert call.header("webhook-id") == str(urgent.run_id)


class BatchFailsOnceAfterAnLwt:
    """The worker's store, except that the first batch written after a conditional write applied fails (as a
    timeout between the LWT and its index rows would), once."""

    def __init__(self, store: CassandraStore) -> None:
        self._store = store
        self._armed = False
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def applied(self, cql: str, params: Any = ()) -> tuple[bool, dict[str, Any]]:
        applied, current = await self._store.applied(cql, params)
        self._armed = self._armed or (applied and not self.failed)
        return applied, current

    async def batch(self, statements: Any, *, logged: bool = True) -> None:
        if self._armed and not self.failed:
            self.failed += 1
            raise Unavailable("batch timed out (injected)")
        await self._store.batch(statements, logged=logged)

    async def round_batch(self, statements: Any) -> None:
        """The worker's unlogged batches (grouped by event-loop round, store.rounds) fail the same way."""
        if self._armed and not self.failed:
            self.failed += 1
            raise Unavailable("batch timed out (injected)")
        await self._store.round_batch(statements)


@pytest.mark.parametrize("status", [200, 503])
async def test_a_batch_failing_after_an_applied_lwt_strands_no_run_and_calls_it_once(scene: Scene, status: int) -> None:
    worker = await scene.worker()
    assert worker.handler is not None
    tables = worker.handler.store
    assert isinstance(tables, CassandraTables)
    flaky = BatchFailsOnceAfterAnLwt(tables.cql)
    worker.handler.store = CassandraTables(flaky)  # type: ignore[arg-type]
    run = await scene.job(HttpTarget(url=scene.sink.url("/flaky", status=status)))
    if status == 200:
        row = await scene.wait_status(run.run_id, "SUCCEEDED")
        assert len(scene.sink.calls_to("/flaky")) == 1
    else:  # retried (FAST_RETRY: 3 attempts): each attempt called once, whatever batch failed
        row = await scene.wait_status(run.run_id, "DEAD", timeout_s=30)
        assert [c.header("X-Tickwheel-Attempt") for c in scene.sink.calls_to("/flaky")] == ["1", "2", "3"]
    assert flaky.failed == 1
    # The attempt whose description rows failed writes them again (not its LWT, which its retry may have taken).
    calls = await eventually(
        lambda: runs.get_attempts(scene.store, run.run_id),
        lambda rows: [a.attempt for a in rows if a.kind == "call"] == list(range(1, row.attempt + 1)),
    )
    assert len(calls) == row.attempt


async def test_a_run_deferred_past_its_max_age_goes_dead_with_the_reason(scene: Scene) -> None:
    await scene.worker(breaker_min_calls=4, breaker_window_s=10.0, breaker_open_s=60.0)
    worker = dataclasses.replace(scene.settings.worker, breaker_min_calls=4, breaker_window_s=10.0)
    limits = FlowLimits(
        dataclasses.replace(worker, breaker_open_s=60.0), RedisClient(scene.settings.redis, prefix=f"{scene.tenant}:")
    )
    caps = Caps(tenant_concurrency=100, target_concurrency=100, target_rate_per_s=1000.0, hold_s=5.0)
    now_ms = int(time.time() * 1000)
    sink_target = canonical_authority(scene.sink.url("/"))
    for _ in range(4):  # the tenant's breaker on the sink opens for a minute
        permit = await limits.acquire(scene.tenant, sink_target, caps, now_ms)
        assert isinstance(permit, Permit)
        await limits.release(permit, failed=True, now_ms=now_ms)
    assert await limits.breaker_open_until_ms(scene.tenant, sink_target) is not None
    short = RetryDoc(max_attempts=3, base_delay_s=0.1, max_delay_s=0.1, max_age_s=1.0)
    run = await scene.job(HttpTarget(url=scene.sink.url("/held")), retry=short)
    row = await scene.wait_status(run.run_id, "DEAD")
    assert (row.last_error or "").startswith("deferred: breaker_open; deferred more than max_age_s 1 s")
    letters = await eventually(
        lambda: scene.store.execute("SELECT run_id FROM dead_letters WHERE tenant_id = ?", [scene.tenant]), bool
    )
    assert letters == [{"run_id": run.run_id}]
    assert scene.sink.calls_to("/held") == []
    await limits.redis.close()


async def test_a_stored_job_with_negative_limits_runs_under_the_defaults_instead_of_waiting_forever(
    scene: Scene,
) -> None:
    await scene.worker()
    target = HttpTarget(url=scene.sink.url("/negative"), max_concurrency=-1, rate_per_s=-1.0)
    run = await scene.job(target)  # written straight to the store, as a job from before the API refused it
    row = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert row.attempt == 1
    attempts = await runs.get_attempts(scene.store, run.run_id)
    assert [a.kind for a in attempts if a.kind == "deferred"] == []
