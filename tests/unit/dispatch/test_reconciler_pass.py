"""The reconciler's pass on the in-memory store and bus (no servers): it reads the recurring jobs' index, so the
once jobs kept settled cost it nothing, and a bounded pass resumes where the last one stopped (issue 14)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from coordinator.reconciler import Reconciler
from tests.factories import definition, job
from tickwheel.bus.memory import MemoryBus
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.reconcile import Verdict
from tickwheel.settings import Settings
from tickwheel.store.jobs import run_of
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import AttemptResult, Job, JobState, RunStatus

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


class CountingStore(MemoryStore):
    """The twin, keeping the ids of the jobs each read answered (a page of the table, or jobs by id)."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs_read: list[uuid.UUID] = []

    async def scan_jobs(self, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
        page, following = await super().scan_jobs(page_size=page_size, cursor=cursor)
        self.jobs_read.extend(j.job_id for j in page)
        return page, following

    async def get_jobs(self, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Job]:
        found = await super().get_jobs(job_ids)
        self.jobs_read.extend(found)
        return found


def reconciler_of(store: MemoryStore, settings: Settings | None = None) -> Reconciler:
    settings = settings or Settings()
    return Reconciler(settings, store, NearAnnouncer(settings, MemoryBus()))


async def every_minute(store: MemoryStore, lost: datetime | None = None) -> Job:
    """A job firing every minute since two hours ago, at its version since 30 minutes ago, whose runs are all
    recorded but the one of `lost`; it asks for no catch-up (a miss is reported, nothing written)."""
    anchor = NOW - timedelta(hours=2)
    made, first = job(NOW + MINUTE, job_definition=definition(every_s=60, anchor=anchor, catch_up="none"))
    await store.create_job(made, first, anchor)
    store.versions_started[(made.job_id, made.version)] = NOW - timedelta(minutes=30)
    for k in range(2, 40):
        at = NOW + MINUTE - MINUTE * k
        if at != lost:
            await store.create_run(run_of(made, at, retention_s=RUN_RETENTION_S), NOW)
    return made


async def test_a_pass_reads_the_recurring_jobs_and_none_of_the_settled_once_jobs() -> None:
    store = CountingStore()
    settled = []
    for i in range(300):
        due = NOW - timedelta(hours=3) + timedelta(seconds=i)
        made, run = job(due, job_definition=definition(every_s=None, anchor=due))
        await store.create_job(made, run, due - timedelta(hours=1))
        await store.claim(run, 0, "w", due + MINUTE, due)
        await store.finish(run, 1, AttemptResult(RunStatus.SUCCEEDED), "w", due, due + MINUTE)
        settled.append(made.job_id)
    lost = NOW - MINUTE * 12
    recurring = await every_minute(store, lost)
    assert await reconciler_of(store).reconcile(NOW) == {Verdict.CATCH_UP_NONE: 1}
    assert recurring.job_id in store.jobs_read
    read = set(store.jobs_read) & set(settled)
    assert not read, f"{len(read)} settled once jobs read: a once job has no window, a pass must not read it"


async def test_a_bounded_pass_resumes_where_the_last_stopped_and_a_cycle_visits_each_recurring_job_once() -> None:
    store = CountingStore()
    made = [await every_minute(store) for _ in range(7)]
    # paused: still in the index until the sweeper drops it, so read, but not checked
    store.jobs[made[0].job_id] = replace(store.jobs[made[0].job_id], state=JobState.PAUSED)
    small = Settings()
    small = replace(small, coordinator=replace(small.coordinator, sweep_page_size=2, reconcile_pages_per_pass=3))
    reconciler = reconciler_of(store, small)
    pages: list[int] = []
    real_page = store.recurring_page

    async def counted_page(part: int, *, page_size: int, cursor: str | None) -> tuple[list[uuid.UUID], str | None]:
        pages.append(part)
        return await real_page(part, page_size=page_size, cursor=cursor)

    store.recurring_page = counted_page  # type: ignore[method-assign]
    passes = 0
    while True:
        before = len(pages)
        assert await reconciler.reconcile(NOW) == {}
        passes += 1
        assert len(pages) - before <= 3, "a pass reads at most its pages"
        if reconciler._part == 0 and reconciler._cursor is None:
            break
        assert passes < 20
    assert passes >= 16 // 3, "16 partitions at a page each at least, three pages a pass"
    assert sorted(map(str, store.jobs_read)) == sorted(str(j.job_id) for j in made), "each once per cycle"
