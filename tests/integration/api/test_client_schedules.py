"""Issue 17 through tickwheel_client against the real API: named jobs, trigger, skip, pause until, backfill,
several calendars and the preview's excluded fires."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api.conftest import Caller
from tickwheel_client import (
    AsyncClient,
    Calendar,
    Conflict,
    Exclude,
    HttpTarget,
    JobSpec,
    PreconditionFailed,
    RunOrigin,
    Schedule,
)


@pytest.fixture
async def tw(alice: Caller) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(api_url=str(alice.client.make_url("")).rstrip("/"), api_key=alice.key) as client:
        yield client


def spec(schedule: Schedule) -> JobSpec:
    return JobSpec(schedule=schedule, target=HttpTarget(url="https://example.com/hook"), payload={"n": 1})


async def test_named_jobs_through_the_client(tw: AsyncClient) -> None:
    daily = spec(Schedule.cron("0 9 * * *", tz="Europe/Paris"))
    made = await tw.put_job_by_name("daily-report", daily)
    again = await tw.put_job_by_name("daily-report", daily)
    assert (again.id, again.version, again.name) == (made.id, 1, "daily-report")
    with pytest.raises(PreconditionFailed):
        await tw.put_job_by_name("daily-report", daily, create_only=True)
    paused = await tw.update_job_by_name("daily-report", state="PAUSED")
    assert paused.version == 2 and (await tw.get_job_by_name("daily-report")).state.value == "PAUSED"
    await tw.delete_job_by_name("daily-report")
    assert (await tw.put_job_by_name("daily-report", daily)).id != made.id
    with pytest.raises(ValueError):
        await tw.get_job_by_name("../jobs")


async def test_trigger_skip_pause_and_backfill_through_the_client(tw: AsyncClient) -> None:
    hourly = Schedule.cron(
        "0 * * * *", calendars=[Calendar(expr="30 12 * * *")], exclude=Exclude(except_=["0 3 * * *"])
    )
    job = await tw.create_job(spec(hourly))
    run = await tw.trigger_job(job.id)
    assert run.origin is RunOrigin.TRIGGER and run.job_id == job.id
    fires = await tw.preview_job(job.id, count=30)
    assert {f.expr for f in fires} == {"0 * * * *", "30 12 * * *"}
    skipped = await tw.skip_occurrences(job.id, count=2)
    assert skipped.schedule.skip == [f.at for f in fires[:2]] and skipped.next_run_at == fires[2].at
    until = (datetime.now(UTC) + timedelta(hours=3)).replace(minute=15, second=0, microsecond=0)
    paused = await tw.pause_until(job.id, until)
    assert paused.schedule.paused_until == until and paused.next_run_at is not None and paused.next_run_at > until
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    planned = await tw.backfill(job.id, end - timedelta(hours=6), end, dry_run=True)
    assert planned.dry_run and planned.count == len(planned.runs) >= 5
    made = await tw.backfill(job.id, end - timedelta(hours=6), end)
    assert [r.id for r in made.runs] == [r.id for r in planned.runs]
    assert {r.origin for r in made.runs} == {RunOrigin.BACKFILL}
    origins = {r.origin async for r in tw.list_runs(job.id)}
    assert {RunOrigin.TRIGGER, RunOrigin.BACKFILL} <= origins
    await tw.delete_job(job.id)
    with pytest.raises(Conflict):
        await tw.trigger_job(job.id)
