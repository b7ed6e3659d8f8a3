"""The runs the dispatcher's chain, the sweeper, the reconciler and the mover write are kept for their tenant's run
retention past their due time (a tenant of 3 days and one of 90), though these processes have only the job: each
reads its tenant's retention (`tickwheel.tenancy.TenantCache`). Read back as TTL(column) from Cassandra."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from coordinator.mover import FarMover
from coordinator.reconciler import Reconciler
from coordinator.sweeper import Repair, Sweeper
from schemas.messages import HttpTarget, JobDefinition, ScheduleDoc
from tests.integration.dispatch.conftest import Cluster, LaneReader
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.ids import shard_of
from tickwheel.core.reconcile import Verdict
from tickwheel.core.retention import DAY_S
from tickwheel.settings import Settings
from tickwheel.store import audit, jobs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import Job, JobState
from tickwheel.store.tables import CassandraTables
from tickwheel.store.tenants import TenantChange, change_tenant, create_tenant

SLACK_S = 120  # between a process's clock at the write and this test's at the read, on a loaded box


@pytest.fixture(params=[3, 90], ids=["3 days", "90 days"])
async def tenant(request: pytest.FixtureRequest, store: CassandraStore) -> tuple[str, int]:
    tenant_id = f"t{uuid.uuid4().hex[:12]}"
    await create_tenant(store, tenant_id, datetime.now(UTC), tenant_id=tenant_id)
    await change_tenant(store, tenant_id, TenantChange(retention_days=request.param))
    return tenant_id, request.param * DAY_S


async def a_job(
    store: CassandraStore, dsettings: Settings, tenant_id: str, schedule: ScheduleDoc, next_at: datetime
) -> Job:
    """An ACTIVE job of the tenant pointing at its run at `next_at`, written with the tables' default retention
    (what the process under test writes must carry the tenant's)."""
    definition = JobDefinition(schedule=schedule, target=HttpTarget(url="https://example.com/tick"))
    job_id, now = uuid.uuid4(), datetime.now(UTC)
    job = Job(
        job_id, tenant_id, shard_of(job_id, dsettings.shards), JobState.ACTIVE, 1, definition, "default",
        next_at, None, 0, None, None, now - timedelta(hours=2), now,
    )  # fmt: skip
    first = jobs.run_of(job, next_at, retention_s=RUN_RETENTION_S)
    job = dataclasses.replace(job, next_run_id=first.run_id)
    await jobs.create_job(store, job, first, job.created_at)
    return job


async def run_ttl(store: CassandraStore, run_id: uuid.UUID, column: str = "status") -> int | None:
    rows = await store.execute(f"SELECT TTL({column}) AS ttl FROM runs WHERE run_id = ?", [run_id])
    return rows[0]["ttl"] if rows else None


def kept_for(ttl: int | None, until: datetime, retention_s: int, now: datetime | None = None) -> bool:
    """Whether a TTL read now ends at `until` plus the retention (within the slack)."""
    expected = max(0, int((until - (now or datetime.now(UTC))).total_seconds())) + retention_s
    return ttl is not None and expected - SLACK_S <= ttl <= expected + 5


async def test_the_chain_writes_the_next_run_for_the_tenants_retention(
    tenant: tuple[str, int], cluster: Cluster, store: CassandraStore, lanes: LaneReader, dsettings: Settings
) -> None:
    tenant_id, kept = tenant
    first = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    schedule = ScheduleDoc(type="interval", every_s=3600, start_at=first.isoformat())
    job = await a_job(store, dsettings, tenant_id, schedule, first)
    await cluster(1)
    await lanes.wait_for(lambda: bool(lanes.runs({job.job_id})), timeout_s=30)
    following = await jobs.get_job(store, job.job_id)
    assert following is not None and following.next_run_id is not None and following.next_run_id != job.next_run_id
    assert following.next_run_at == first + timedelta(hours=1)
    assert kept_for(await run_ttl(store, following.next_run_id), following.next_run_at, kept)


async def test_the_sweepers_repairs_keep_the_tenants_retention(
    tenant: tuple[str, int], store: CassandraStore, dsettings: Settings
) -> None:
    tenant_id, kept = tenant
    now = datetime.now(UTC)
    soon = (now + timedelta(minutes=5)).replace(microsecond=0)
    missing = await a_job(store, dsettings, tenant_id, ScheduleDoc(type="interval", every_s=3600,
                          start_at=soon.isoformat()), soon)  # fmt: skip
    assert missing.next_run_id is not None
    await store.execute("DELETE FROM runs WHERE run_id = ?", [missing.next_run_id])
    long_ago = (now - timedelta(minutes=30)).replace(microsecond=0)
    overdue = await a_job(store, dsettings, tenant_id, ScheduleDoc(type="interval", every_s=3600,
                          start_at=long_ago.isoformat()), long_ago)  # fmt: skip
    assert overdue.next_run_id is not None
    producer = KafkaProducer(dsettings.kafka)
    try:
        sweeper = Sweeper(dsettings, CassandraTables(store), producer)
        assert await sweeper.check(missing, now) is Repair.RECREATE
        assert await sweeper.check(overdue, now) is Repair.REFIRE
    finally:
        await producer.close()
    assert kept_for(await run_ttl(store, missing.next_run_id), soon, kept)
    assert kept_for(await run_ttl(store, overdue.next_run_id, "due_at"), now, kept)


async def test_the_reconcilers_repairs_keep_the_tenants_retention(
    tenant: tuple[str, int], store: CassandraStore, dsettings: Settings
) -> None:
    tenant_id, kept = tenant
    now = datetime.now(UTC)
    anchor = (now - timedelta(hours=2)).replace(second=0, microsecond=0)
    schedule = ScheduleDoc(type="interval", every_s=60, anchor_at=anchor.isoformat(), catch_up="all",
                           catch_up_max_count=3)  # fmt: skip
    next_at = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    job = await a_job(store, dsettings, tenant_id, schedule, next_at)
    change = audit.JobChangeRecord(job.job_id, tenant_id, now - timedelta(minutes=5), 1, "resume", "k", [], {})
    await audit.record_change(store, change, 3600)  # its window starts 5 minutes ago: all of it lost
    producer = KafkaProducer(dsettings.kafka)
    try:
        reconciler = Reconciler(dsettings, CassandraTables(store), NearAnnouncer(dsettings, producer))
        repaired = [f.at for f in await reconciler.check(job, now) if f.verdict is Verdict.REPAIRED]
    finally:
        await producer.close()
    assert repaired
    for at in repaired:
        run = jobs.run_of(job, at, retention_s=kept)
        assert kept_for(await run_ttl(store, run.run_id), now, kept)  # due now: written to fire now


async def test_the_mover_writes_a_far_run_again_for_the_tenants_retention(
    tenant: tuple[str, int], store: CassandraStore, dsettings: Settings
) -> None:
    tenant_id, kept = tenant
    due = (datetime.now(UTC) + timedelta(days=400)).replace(microsecond=0)
    job = await a_job(store, dsettings, tenant_id, ScheduleDoc(type="once", run_at=due.isoformat()), due)
    assert job.next_run_id is not None
    await store.execute("DELETE FROM runs WHERE run_id = ?", [job.next_run_id])  # as past Cassandra's 20-year TTL
    moved_at = due - timedelta(days=1)
    producer = KafkaProducer(dsettings.kafka)
    try:
        assert await FarMover(dsettings, CassandraTables(store), producer).move(moved_at) >= 1
    finally:
        await producer.close()
    assert kept_for(await run_ttl(store, job.next_run_id), due, kept, now=moved_at)
    [history] = await store.execute("SELECT TTL(status) AS ttl FROM runs_by_job WHERE job_id = ?", [job.job_id])
    assert kept_for(history["ttl"], due, kept, now=moved_at)
