"""The reconciler on the real store: promised occurrences without a run are written again within the job's
catch-up policy, the rest are reported once as missed; the window starts at the job's current version."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Literal

from coordinator.reconciler import Reconciler
from schemas.messages import HttpTarget, JobDefinition, ScheduleDoc
from tickwheel import metrics
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.bus.near import NearAnnouncer
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
    job = dataclasses.replace(job, next_run_id=jobs.run_of(job, next_at).run_id)
    await jobs.create_job(store, job, jobs.run_of(job, next_at), now)
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
        await runs.create_run(store, jobs.run_of(job, at), now)
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
        row = await runs.get_run(store, jobs.run_of(job, at).run_id)
        assert row is not None and row.status == "SCHEDULED" and row.job_version == 2
    assert sorted(f.at for f in missed) == sorted(lost[3:])

    again = await reconciler.check(job, now + timedelta(seconds=1))
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
