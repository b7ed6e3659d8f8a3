"""The reconciler on the real store: promised occurrences without a run are written again within the job's
catch-up policy, the rest are reported once as missed; the window starts at the job's current version."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest

import coordinator.main as coordinator_main
from coordinator.reconciler import Reconciler
from schemas.messages import DueRun, HttpTarget, JobDefinition, ScheduleDoc, decode_due_run, topic_names
from tests.conftest import own_keyspace
from tickwheel import metrics
from tickwheel.bus.kafka import KafkaConsumer, KafkaProducer
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.ids import shard_of
from tickwheel.core.reconcile import Finding, Verdict
from tickwheel.settings import Settings
from tickwheel.store import audit, jobs, runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import Job, JobState
from tickwheel.store.tables import CassandraTables

MINUTE = timedelta(minutes=1)


async def every_minute_job(
    store: CassandraStore, dsettings: Settings, now: datetime, catch_up: Literal["all", "none"]
) -> Job:
    """A job firing every minute on the minute, at version 2 since 30 minutes ago, pointing at its next run."""
    anchor = (now - timedelta(hours=2)).replace(second=0, microsecond=0)
    schedule = ScheduleDoc(type="interval", every_s=60, anchor_at=anchor.isoformat(), catch_up=catch_up,
                           catch_up_max_count=3)  # fmt: skip
    definition = JobDefinition(schedule=schedule, target=HttpTarget(url="https://example.com/tick"))
    job_id = uuid.uuid4()
    next_at = now.replace(second=0, microsecond=0) + MINUTE
    job = Job(
        job_id, "t-reconcile", shard_of(job_id, dsettings.shards), JobState.ACTIVE, 2, definition, "default",
        next_at, None, 100, None, None, now - timedelta(hours=2), now,
    )  # fmt: skip
    first = jobs.run_of(job, next_at, retention_s=RUN_RETENTION_S)
    job = dataclasses.replace(job, next_run_id=first.run_id)
    await jobs.create_job(store, job, first, job.created_at)  # made two hours ago
    change = audit.JobChangeRecord(job_id, job.tenant_id, now - timedelta(minutes=30), 2, "resume", "k", [], {})
    await audit.record_change(store, change, 3600)
    return job


async def test_missing_fires_are_repaired_within_catch_up_and_the_rest_reported_once(
    dsettings: Settings, store: CassandraStore, producer: KafkaProducer
) -> None:
    now = datetime.now(UTC)
    job = await every_minute_job(store, dsettings, now, "all")
    grace = timedelta(seconds=dsettings.coordinator.sweep_grace_s)
    assert job.next_run_at is not None
    occurrences = [job.next_run_at - MINUTE * k for k in range(1, 40)]
    in_window = [at for at in occurrences if now - timedelta(minutes=30) < at <= now - grace]
    lost = in_window[:5]  # the five newest
    for at in in_window[5:]:
        await runs.create_run(store, jobs.run_of(job, at, retention_s=RUN_RETENTION_S), now)
    missed: list[Finding] = []

    async def on_missed(_: Job, finding: Finding) -> None:
        missed.append(finding)

    reconciler = Reconciler(dsettings, CassandraTables(store), NearAnnouncer(dsettings, producer), on_missed)
    before = metrics.reconciler_findings.labels("repaired")._value.get()
    findings = await reconciler.check(job, now)
    assert sorted((f.at, f.verdict) for f in findings) == sorted(
        [(at, Verdict.REPAIRED) for at in lost[:3]] + [(at, Verdict.OVER_COUNT) for at in lost[3:]]
    )
    assert metrics.reconciler_findings.labels("repaired")._value.get() == before + 3
    for at in lost[:3]:
        row = await runs.get_run(store, jobs.run_of(job, at, retention_s=RUN_RETENTION_S).run_id)
        assert row is not None and row.status == "SCHEDULED" and row.job_version == 2
    assert sorted(f.at for f in missed) == sorted(lost[3:])

    # The same instant: a later one can move the window's end (now - grace) across a minute and bring in the
    # next occurrence, which nobody fired either (CI on 2026-12-02 failed that way).
    again = await reconciler.check(job, now)
    assert again == [], "a repaired fire is recorded now, and a miss is reported once"


async def test_nothing_before_the_current_version_or_after_the_next_run_is_held_against_a_job(
    dsettings: Settings, store: CassandraStore, producer: KafkaProducer
) -> None:
    now = datetime.now(UTC)
    job = await every_minute_job(store, dsettings, now, "none")
    reconciler = Reconciler(dsettings, CassandraTables(store), NearAnnouncer(dsettings, producer))
    after, until = await reconciler.window(job, now)
    assert abs((after - (now - timedelta(minutes=30))).total_seconds()) < 0.01
    assert job.next_run_at is not None and until < job.next_run_at
    findings = await reconciler.check(job, now)
    assert findings and {f.verdict for f in findings} == {Verdict.CATCH_UP_NONE}
    assert min(f.at for f in findings) > now - timedelta(minutes=30)


async def test_a_pass_reads_a_bounded_number_of_index_pages_and_the_next_pass_resumes_after_them(
    dsettings: Settings, store: CassandraStore, producer: KafkaProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    for _ in range(3):
        await every_minute_job(store, dsettings, now, "none")
    pages = dataclasses.replace(dsettings.coordinator, sweep_page_size=1, reconcile_pages_per_pass=2)
    paged = dataclasses.replace(dsettings, coordinator=pages)
    tables = CassandraTables(store)
    reconciler = Reconciler(paged, tables, NearAnnouncer(dsettings, producer))
    asked: list[tuple[int, str | None]] = []
    real_page = tables.recurring_page

    async def counted_page(part: int, *, page_size: int, cursor: str | None) -> Any:
        asked.append((part, cursor))
        return await real_page(part, page_size=page_size, cursor=cursor)

    monkeypatch.setattr(tables, "recurring_page", counted_page)
    await reconciler.reconcile(now)
    assert len(asked) == 2 and asked[0] == (0, None), "the index's first page, then one more"
    resumed = (reconciler._part, reconciler._cursor)
    await reconciler.reconcile(now)
    assert len(asked) == 4 and asked[2] == resumed, "the second pass resumed where the first stopped"


async def test_the_active_coordinator_repairs_and_puts_unrepaired_misses_on_the_jobs_lane(
    dsettings: Settings, namespace: str
) -> None:
    # A keyspace of its own: the coordinator's passes read every job of the keyspace, and the run's shared one holds
    # every earlier test's (thousands after the API tests): the wait would be theirs, and the repairs too.
    async with own_keyspace(dsettings, namespace) as (own, store):
        await reconciled(own, store)


async def reconciled(dsettings: Settings, store: CassandraStore) -> None:
    now = datetime.now(UTC)
    skipped = await every_minute_job(store, dsettings, now, "none")
    caught_up = await every_minute_job(store, dsettings, now, "all")
    assert caught_up.next_run_at is not None
    lost = caught_up.next_run_at - MINUTE * 10  # one occurrence inside the window, older than the grace
    for k in range(1, 30):
        at = caught_up.next_run_at - MINUTE * k
        if at != lost:
            await runs.create_run(store, jobs.run_of(caught_up, at, retention_s=RUN_RETENTION_S), now)
    fast = dataclasses.replace(dsettings.coordinator, reconcile_interval_s=0.3)
    running = await coordinator_main.start(dataclasses.replace(dsettings, coordinator=fast), store=store, name="rc")
    consumer = KafkaConsumer(dsettings.kafka, group_id=f"test-missed-{uuid.uuid4().hex[:6]}")
    try:
        await consumer.subscribe([topic_names(dsettings.kafka.topic_prefix)["default"]])
        missed: list[DueRun] = []
        deadline = asyncio.get_running_loop().time() + 60
        while not missed and asyncio.get_running_loop().time() < deadline:
            for record in await consumer.poll(500, 0.5):
                due = decode_due_run(record.value)
                if due.kind == "missed" and due.job_id == skipped.job_id:
                    missed.append(due)
        assert missed, "no missed message for the job without catch-up"
        assert missed[0].missed_reason == "catch_up_none" and missed[0].tenant_id == skipped.tenant_id
        occurrence = datetime.fromtimestamp(missed[0].scheduled_at_ms / 1000, UTC)
        assert missed[0].run_id == jobs.run_of(skipped, occurrence, retention_s=RUN_RETENTION_S).run_id
        repaired = None
        while repaired is None and asyncio.get_running_loop().time() < deadline:  # the scan may reach it later
            repaired = await runs.get_run(store, jobs.run_of(caught_up, lost, retention_s=RUN_RETENTION_S).run_id)
            await asyncio.sleep(0.2)
        assert repaired is not None and repaired.status == "SCHEDULED"
    finally:
        await consumer.close()
        await running.stop()


async def test_nothing_before_a_job_existed_is_held_against_it_when_the_audit_log_has_no_row(
    dsettings: Settings, store: CassandraStore, producer: KafkaProducer
) -> None:
    now = datetime.now(UTC)
    job = await every_minute_job(store, dsettings, now, "none")
    created = now - timedelta(minutes=20)
    unaudited = dataclasses.replace(job, version=7, created_at=created)  # no audit row for version 7
    reconciler = Reconciler(dsettings, CassandraTables(store), NearAnnouncer(dsettings, producer))
    after, _ = await reconciler.window(unaudited, now)
    assert after == created
