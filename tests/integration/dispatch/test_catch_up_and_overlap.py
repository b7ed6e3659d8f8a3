"""Catch-up and overlap policies, at the dispatcher and the sweeper: a dispatcher stopped at 12:00 and
restarted at 12:10:30 (its clock injected, nothing waits ten minutes) fires what each job's catch-up policy
says; an occurrence whose previous run is still RUNNING is skipped, buffered once, or started."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import UTC, datetime, timedelta

import dispatcher.main as dispatcher_main
from coordinator.sweeper import Repair, Sweeper
from schemas.messages import DueRun, ScheduleDoc
from tests.integration.dispatch.conftest import Cluster, LaneReader, covered, wait_until, write_job
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.core.ids import run_id_for
from tickwheel.settings import Settings
from tickwheel.store import checkpoints
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import get_job
from tickwheel.store.runs import AttemptResult, RunStatus, claim, finish, get_run
from tickwheel.store.tables import CassandraTables

MINUTELY = {"type": "cron", "expr": "* * * * *", "tz": "UTC"}


def minutely(catch_up: str, **limits: int) -> ScheduleDoc:
    names = {"max_count": "catch_up_max_count", "max_age_s": "catch_up_max_age_s"}
    return ScheduleDoc(**MINUTELY, catch_up=catch_up, **{names[k]: v for k, v in limits.items()})  # type: ignore[arg-type]


async def passed(store: CassandraStore, shards: set[int], at: datetime, timeout_s: float = 30) -> None:
    """Until the checkpoints of `shards` are past `at` (a dispatcher stopped then resumes after it)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        marks = await checkpoints.read(store, shards)
        if len(marks) == len(shards) and all(mark.fired_through > at for mark in marks.values()):
            return
        assert asyncio.get_running_loop().time() < deadline, f"checkpoints not past {at}: {marks}"
        await asyncio.sleep(0.2)


def shifted(at: datetime) -> float:
    """Seconds to add to the wall clock so that it reads `at` now."""
    return at.timestamp() - time.time()


async def test_a_restarted_dispatcher_fires_missed_occurrences_as_each_catch_up_policy_says(
    dsettings: Settings, store: CassandraStore, cluster: Cluster, lanes: LaneReader
) -> None:
    m0 = (datetime.now(UTC) + timedelta(minutes=2)).replace(second=0, microsecond=0)
    jobs = {
        "all, maxRuns 3": await write_job(store, minutely("all", max_count=3), m0),
        "all, maxRuns 5, maxAge 200 s": await write_job(store, minutely("all", max_count=5, max_age_s=200), m0),
        "latest": await write_job(store, minutely("latest"), m0),
        "skip": await write_job(store, minutely("skip"), m0),
    }
    expected = {"all, maxRuns 3": 3, "all, maxRuns 5, maxAge 200 s": 3, "latest": 1, "skip": 0}
    job_ids = {run.job_id for run in jobs.values()}
    await cluster(0)  # the coordinator

    # Up at 11:59:57 (shifted clock): fires 12:00 and chains 12:01; then stopped.
    early = shifted(m0 - timedelta(seconds=3))
    first = await dispatcher_main.start(dsettings, store=store, name="before", clock=lambda: time.time() + early)
    try:
        await lanes.wait_for(lambda: len(lanes.runs(job_ids)) >= 4, timeout_s=30)
        await passed(store, {run.shard for run in jobs.values()}, m0)
    finally:
        await first.stop()
    assert {r.scheduled_at_ms for r in lanes.runs(job_ids)} == {int(m0.timestamp() * 1000)}

    # Back at 12:10:30: ten occurrences (12:01 .. 12:10) were missed; 12:10 is 30 s late, on time.
    newest = {
        name: [int((m0 + timedelta(minutes=10 - k)).timestamp() * 1000) for k in range(expected[name])][::-1]
        for name in jobs
    }
    newest["skip"] = [int((m0 + timedelta(minutes=10)).timestamp() * 1000)]  # on time: not missed

    def sent(name: str) -> list[int]:
        return sorted({r.scheduled_at_ms for r in lanes.runs({jobs[name].job_id})} - {int(m0.timestamp() * 1000)})

    late = shifted(m0 + timedelta(minutes=10, seconds=30))
    second = await dispatcher_main.start(dsettings, store=store, name="after", clock=lambda: time.time() + late)
    try:
        await wait_until(lambda: covered([second]), timeout_s=30)
        # Every missed or chained occurrence is due by now and goes out at once; a loaded box sends them late.
        await lanes.wait_for(lambda: all(set(newest[name]) <= set(sent(name)) for name in jobs), timeout_s=30)
        for _ in range(5):  # and nothing beyond them: anything the policy should have held back went out as early
            await lanes.poll()
    finally:
        await second.stop()
    for name, run in jobs.items():
        assert sent(name) == newest[name], name
        pending = await get_run(store, run_id_for(run.job_id, m0 + timedelta(minutes=1)))
        assert pending is not None
        assert pending.status == RunStatus.CANCELLED, name  # 12:01 itself is missed in every case


async def test_the_sweeper_applies_the_catch_up_policy_to_an_overdue_run(
    dsettings: Settings, store: CassandraStore
) -> None:
    m0 = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
    skip = await write_job(store, minutely("skip"), m0)
    latest = await write_job(store, minutely("latest"), m0)
    every = await write_job(store, minutely("all", max_count=3), m0)
    now = m0 + timedelta(minutes=20, seconds=30)
    producer = KafkaProducer(dsettings.kafka)
    try:
        sweeper = Sweeper(dsettings, CassandraTables(store), producer)
        for run in (skip, latest, every):
            row = await get_job(store, run.job_id)
            assert row is not None
            assert await sweeper.check(row, now) is Repair.SKIP_MISSED
    finally:
        await producer.close()
    points = {
        skip.job_id: m0 + timedelta(minutes=20),  # 30 s late: the first occurrence on time
        latest.job_id: m0 + timedelta(minutes=20),
        every.job_id: m0 + timedelta(minutes=18),  # the oldest of the newest three
    }
    for run in (skip, latest, every):
        [job] = await store.execute("SELECT next_run_at, next_run_id FROM jobs WHERE job_id = ?", [run.job_id])
        assert job["next_run_at"] == points[run.job_id].replace(tzinfo=None)
        old = await get_run(store, run.run_id)
        assert old is not None and old.status == RunStatus.CANCELLED
        new = await get_run(store, job["next_run_id"])
        assert new is not None and new.status == RunStatus.SCHEDULED
        assert new.due_at is not None and new.due_at >= now.replace(microsecond=0) - timedelta(
            seconds=1
        )  # due at once, in a minute read


async def test_an_occurrence_while_the_previous_run_is_running_is_skipped_buffered_or_started(
    dsettings: Settings, store: CassandraStore, cluster: Cluster, lanes: LaneReader
) -> None:
    first_at = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    runs = {}
    for overlap in ("skip", "buffer_one", "allow"):
        schedule = ScheduleDoc(type="interval", every_s=1, start_at=first_at.isoformat(), overlap=overlap)
        runs[overlap] = await write_job(store, schedule, first_at)
    s = dataclasses.replace(dsettings, dispatcher=dataclasses.replace(dsettings.dispatcher, overlap_recheck_s=0.5))
    await cluster(0)
    running = await dispatcher_main.start(s, store=store, name="overlap")
    try:
        await lanes.wait_for(lambda: all(lanes.runs({r.job_id}) for r in runs.values()), timeout_s=30)
        for run in runs.values():  # a worker takes the first run of each job and keeps it RUNNING
            lease = datetime.now(UTC) + timedelta(minutes=5)
            assert (await claim(store, run, 0, "slow-worker", lease, datetime.now(UTC))).applied
        held_from_ms = int(time.time() * 1000)

        def fired_meanwhile(name: str) -> list[DueRun]:
            return [r for r in lanes.runs({runs[name].job_id}) if r.run_id != runs[name].run_id]

        await asyncio.sleep(4.0)
        # At least 4 s held, and until `allow` went on firing (a loaded box chains its 1 s occurrences late).
        for _ in range(5):
            await lanes.poll()
        await lanes.wait_for(lambda: len(fired_meanwhile("allow")) >= 3, timeout_s=30)
        during = {name: fired_meanwhile(name) for name in runs}
        released_ms = int(time.time() * 1000)
        for run in runs.values():
            row = await get_run(store, run.run_id)
            assert row is not None
            done = AttemptResult(RunStatus.SUCCEEDED, response_code=200)
            assert await finish(store, row.identity(), 1, done, "slow-worker", datetime.now(UTC), datetime.now(UTC))

        def after_skip() -> list[DueRun]:
            return [r for r in lanes.runs({runs["skip"].job_id}) if r.fired_at_ms > released_ms]

        def buffered() -> set[uuid.UUID]:
            # Held during the hold (scheduled 3 s or more before the release: an occurrence the dispatcher, late on
            # a loaded box, judged only after the release fires as a normal one), sent after it.
            job = runs["buffer_one"]
            return {
                r.run_id for r in lanes.runs({job.job_id})
                if r.scheduled_at_ms < released_ms - 3000 and r.fired_at_ms > released_ms and r.run_id != job.run_id
            }  # fmt: skip

        await lanes.wait_for(lambda: bool(after_skip()) and bool(buffered()), timeout_s=30)
        for _ in range(5):  # a second buffered occurrence would go out beside the first
            await lanes.poll()
    finally:
        await running.stop()

    # Occurrences are judged when due (never early), so one scheduled after the claims was judged while held.
    # allow: every occurrence went out while the first was running
    assert len(during["allow"]) >= 3
    # skip: nothing went out meanwhile; those occurrences are cancelled; afterwards the job runs again
    assert [r for r in during["skip"] if r.scheduled_at_ms > held_from_ms] == []
    assert after_skip()
    # buffer_one: nothing meanwhile; exactly one waiting occurrence goes out once the first finishes
    assert [r for r in during["buffer_one"] if r.scheduled_at_ms > held_from_ms] == []
    assert len(buffered()) == 1
    cancelled = await store.execute("SELECT status FROM runs_by_job WHERE job_id = ?", [runs["skip"].job_id])
    assert sum(1 for row in cancelled if row["status"] == RunStatus.CANCELLED) >= 2
