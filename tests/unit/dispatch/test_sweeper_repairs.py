"""The sweeper's repairs against the in-memory store and bus (no servers): each kind of repair is still found by
a pass that reads the recurring jobs' index and the due rows of the minutes past their grace, and a pass does not
read the once jobs that have settled."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from coordinator.sweeper import MARK, Repair, Sweeper
from schemas.messages import DueRun
from tests.factories import definition, job
from tickwheel.bus.memory import MemoryBus
from tickwheel.core.instants import epoch_ms
from tickwheel.settings import Settings
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import AttemptResult, DueState, Job, NewRun, RunStatus

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
DUE = NOW - timedelta(minutes=10)


class CountingStore(MemoryStore):
    """The twin, keeping what the sweeper read: each read's kind and the ids (of jobs or runs) it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, list[uuid.UUID]]] = []

    async def scan_jobs(self, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
        page, following = await super().scan_jobs(page_size=page_size, cursor=cursor)
        self.reads.append(("scan_jobs", [j.job_id for j in page]))
        return page, following

    async def due_states(self, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DueState]:
        self.reads.append(("due_states", list(run_ids)))
        return await super().due_states(run_ids)

    async def get_jobs(self, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Job]:
        self.reads.append(("get_jobs", list(job_ids)))
        return await super().get_jobs(job_ids)

    async def read_shards(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueRun]:
        rows = await super().read_shards(shards, since, until)
        if rows:
            self.reads.append(("read_shards", [r.run_id for r in rows]))
        return rows

    def ids_read(self) -> set[uuid.UUID]:
        return {read for _, ids in self.reads for read in ids}


def once(at: datetime) -> tuple[Job, NewRun]:
    """A once job due at `at` (its schedule's only occurrence)."""
    return job(at, job_definition=definition(every_s=None, anchor=at))


async def swept_before(store: MemoryStore, at: datetime) -> None:
    """As if earlier passes had swept every minute before `at` (no first pass over the whole table)."""
    await store.mark_swept(MARK, at)


async def rows_at(store: MemoryStore, run: NewRun, at: datetime) -> list[tuple[int, str, int]]:
    rows = await store.read_range(run.shard, at, at + timedelta(seconds=1))
    return [(r.attempt, r.kind, r.fire_at_ms) for r in rows if r.run_id == run.run_id]


async def test_a_missing_next_run_of_a_recurring_job_is_written_again_at_its_time() -> None:
    store = MemoryStore()
    made, run = job(NOW + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=NOW))
    await store.create_job(made, run, NOW)
    await swept_before(store, NOW)
    del store.runs[run.run_id]  # the process that moved the pointer died before writing the run: no row names it
    store.due_rows.clear()
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.RECREATE: 1}
    assert store.runs[run.run_id].status is RunStatus.SCHEDULED
    assert await rows_at(store, run, run.fire_at) == [(0, "run", epoch_ms(run.fire_at))]
    assert store.sweeps == 1 and store.repairs == {"missing_run": 1}


async def test_a_missing_next_run_long_past_is_run_now_as_its_catch_up_says() -> None:
    store = MemoryStore()
    made, run = job(DUE, job_definition=definition(every_s=3600, anchor=DUE))
    await store.create_job(made, run, DUE)
    await swept_before(store, NOW)
    del store.runs[run.run_id]
    store.due_rows.clear()
    # missing and older than the grace (`missing_run_stale`): the newest missed occurrence, so "latest" runs it now
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.REFIRE: 1}
    assert await rows_at(store, run, NOW) == [(0, "run", epoch_ms(NOW))]


async def test_a_recurring_jobs_next_run_with_no_due_row_is_fired_when_overdue() -> None:
    store = MemoryStore()
    made, run = job(DUE, job_definition=definition(every_s=3600, anchor=DUE))
    await store.create_job(made, run, DUE)
    await swept_before(store, DUE - timedelta(minutes=5))
    store.due_rows.clear()  # the run was written, its due row never (a chain's batch half applied)
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.REFIRE: 1}
    assert store.runs[run.run_id].due_at == NOW


async def test_an_overdue_once_run_whose_fire_was_lost_is_fired_now() -> None:
    store = MemoryStore()
    made, run = once(DUE)
    await store.create_job(made, run, DUE - timedelta(hours=1))
    await swept_before(store, DUE - timedelta(minutes=5))
    # its due row fired at DUE and the message never reached a worker: the row is still there, the run SCHEDULED
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.REFIRE: 1}
    assert await rows_at(store, run, NOW) == [(0, "run", epoch_ms(NOW))]
    assert store.runs[run.run_id].due_at == NOW
    # its new row is at now: the minutes after the mark are swept once they pass the grace, and it is not overdue
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW + timedelta(minutes=1)) == {}


async def test_an_overdue_once_run_its_catch_up_does_not_run_is_cancelled() -> None:
    store = MemoryStore()
    made, run = job(DUE, job_definition=definition(every_s=None, anchor=NOW))  # a newer occurrence: skipped
    await store.create_job(made, run, DUE - timedelta(hours=1))
    await swept_before(store, DUE - timedelta(minutes=5))
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.SKIP_MISSED: 1}
    assert store.runs[run.run_id].status is RunStatus.CANCELLED
    assert store.jobs[made.job_id].next_run_id != run.run_id


async def test_a_run_stranded_running_past_its_lease_gets_a_lease_check_at_now() -> None:
    store = MemoryStore()
    made, run = once(DUE)
    await store.create_job(made, run, DUE - timedelta(hours=1))
    await swept_before(store, DUE - timedelta(minutes=5))
    lease_until = DUE + timedelta(minutes=1)
    await store.claim(run, 0, "gone", lease_until, DUE)
    del store.due_rows[run.shard][(epoch_ms(lease_until), run.run_id, 1, "lease_check")]  # its lease check lost
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.LEASE_LAPSED: 1}
    assert await rows_at(store, run, NOW) == [(1, "lease_check", epoch_ms(NOW))]


async def test_a_lease_check_that_fired_and_found_nothing_to_do_is_caught_after_the_grace() -> None:
    store = MemoryStore()
    made, run = once(DUE)
    await store.create_job(made, run, DUE - timedelta(hours=1))
    lease_until = DUE + timedelta(minutes=1)
    await store.claim(run, 0, "gone", lease_until, DUE)
    await swept_before(store, DUE + timedelta(minutes=1))  # the run's own row is swept already; its lease's is not
    # the lease check fired when a dispatcher whose clock ran behind saw the lease live, and dropped it
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.LEASE_LAPSED: 1}


async def test_a_retry_past_its_time_that_was_never_claimed_gets_its_run_row_at_now() -> None:
    store = MemoryStore()
    made, run = once(DUE)
    await store.create_job(made, run, DUE - timedelta(hours=1))
    await swept_before(store, DUE - timedelta(minutes=5))
    await store.claim(run, 0, "w", DUE + timedelta(minutes=1), DUE)
    retry_at = DUE + timedelta(minutes=2)
    await store.finish(run, 1, AttemptResult(RunStatus.RETRY, retry_at=retry_at), "w", DUE, DUE + timedelta(seconds=5))
    # the retry's row fired and was lost on its way: still there, the run still RETRY at attempt 1
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.RETRY_UNFIRED: 1}
    assert await rows_at(store, run, NOW) == [(1, "run", epoch_ms(NOW))]
    assert store.runs[run.run_id].due_at == NOW


async def test_runs_that_finished_or_wait_inside_their_lease_are_left_alone() -> None:
    store = MemoryStore()
    (done_job, done), (busy_job, busy) = once(DUE), once(DUE)
    for made, run in ((done_job, done), (busy_job, busy)):
        await store.create_job(made, run, DUE - timedelta(hours=1))
        await store.claim(run, 0, "w", NOW + timedelta(minutes=5), DUE)
    await store.finish(done, 1, AttemptResult(RunStatus.SUCCEEDED), "w", DUE, DUE + timedelta(seconds=1))
    await swept_before(store, DUE - timedelta(minutes=5))
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {}


async def test_a_pass_reads_the_runs_of_a_minute_together_and_still_repairs_each() -> None:
    store = CountingStore()
    made = [job(DUE, job_definition=definition(every_s=None, anchor=NOW)) for _ in range(7)]
    for j, run in made:
        await store.create_job(j, run, DUE - timedelta(hours=1))
    await swept_before(store, DUE - timedelta(minutes=5))
    _, stranded_run = made[3]
    await store.claim(stranded_run, 0, "gone", DUE + timedelta(minutes=1), DUE)
    del store.due_rows[stranded_run.shard][
        (epoch_ms(DUE + timedelta(minutes=1)), stranded_run.run_id, 1, "lease_check")
    ]
    # The six SCHEDULED runs are overdue (skipped by their catch-up), the claimed one is stranded.
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.SKIP_MISSED: 6, Repair.LEASE_LAPSED: 1}
    kinds = [kind for kind, _ in store.reads]
    assert kinds.count("due_states") == 1 and kinds.count("get_jobs") == 1  # one read of each for the minute
    [states] = [ids for kind, ids in store.reads if kind == "due_states"]
    [jobs] = [ids for kind, ids in store.reads if kind == "get_jobs"]
    assert len(states) == 7 and len(jobs) == 6  # a job is read only for a run that is overdue


async def test_a_pass_over_settled_once_jobs_reads_none_of_them_again() -> None:
    store = CountingStore()
    settled = [once(DUE + timedelta(seconds=i % 60)) for i in range(300)]
    for made, run in settled:
        await store.create_job(made, run, DUE - timedelta(hours=1))
        await store.claim(run, 0, "w", run.fire_at + timedelta(minutes=1), run.fire_at)
        result = AttemptResult(RunStatus.SUCCEEDED)
        await store.finish(run, 1, result, "w", run.fire_at, run.fire_at, run.fire_at + timedelta(minutes=1))
    waiting, first = once(NOW + timedelta(hours=1))  # and one not due yet
    await store.create_job(waiting, first, NOW)
    sweeper = Sweeper(Settings(), store, MemoryBus())
    assert await sweeper.sweep(NOW) == {}  # the keyspace's first pass: the whole table once, the last hour's rows
    store.reads.clear()
    for passes in range(1, 6):  # every later pass: the minutes since, which hold none of them
        assert await sweeper.sweep(NOW + timedelta(minutes=passes)) == {}
    ids = {j.job_id for j, _ in settled} | {r.run_id for _, r in settled}
    assert not store.ids_read() & ids
    assert store.marks[MARK] == NOW + timedelta(minutes=5) - timedelta(seconds=Settings().coordinator.sweep_grace_s)


async def test_each_minute_is_swept_once() -> None:
    store = CountingStore()
    made, run = once(DUE)
    await store.create_job(made, run, DUE - timedelta(hours=1))
    await store.claim(run, 0, "w", DUE + timedelta(minutes=1), DUE)
    await store.finish(run, 1, AttemptResult(RunStatus.SUCCEEDED), "w", DUE, DUE + timedelta(seconds=1))
    await swept_before(store, DUE - timedelta(minutes=1))
    sweeper = Sweeper(Settings(), store, MemoryBus())
    for passes in range(10):  # one pass a minute: the run's minute is swept (and its run read) once
        await sweeper.sweep(NOW + timedelta(minutes=passes))
    assert sum(ids.count(run.run_id) for kind, ids in store.reads if kind == "due_states") == 1


async def test_the_first_pass_indexes_the_recurring_jobs_made_before_the_index() -> None:
    store = MemoryStore()
    made, run = job(NOW + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=NOW))
    ended, _ = job(NOW + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=NOW))
    await store.create_job(made, run, NOW)
    await store.create_job(ended, None, NOW)
    store.jobs[ended.job_id] = replace(store.jobs[ended.job_id], next_run_id=None, next_run_at=None)
    store.recurring.clear()  # made before migration 0008
    del store.runs[run.run_id]
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.RECREATE: 1}
    assert set(store.recurring) == {made.job_id}  # a job with no next run has nothing to check


async def test_the_first_pass_writes_a_pages_index_rows_together() -> None:
    written: list[list[uuid.UUID]] = []

    class Together(MemoryStore):
        async def mark_all_recurring(self, jobs: Sequence[Job]) -> None:
            written.append([j.job_id for j in jobs])
            await super().mark_all_recurring(jobs)

    store = Together()
    made = []
    for _ in range(5):
        recurring, run = job(NOW + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=NOW))
        await store.create_job(recurring, run, NOW)
        made.append(recurring.job_id)
    settled, first = once(DUE)  # a once job has no index row
    await store.create_job(settled, first, DUE)
    store.recurring.clear()  # made before migration 0008
    settings = Settings()
    settings = replace(settings, coordinator=replace(settings.coordinator, sweep_page_size=2))
    await Sweeper(settings, store, MemoryBus()).sweep(NOW)
    assert len(written) <= 3 and all(len(ids) <= 2 for ids in written), "one write per page of two jobs"
    assert sorted(map(str, (i for ids in written for i in ids))) == sorted(map(str, made))
    assert set(store.recurring) == set(made)


async def test_a_recurring_job_deleted_or_ended_leaves_the_index_and_one_made_recurring_since_stays() -> None:
    now = datetime.now(UTC)
    store = MemoryStore()
    kept, _ = job(now + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=now))
    gone, _ = job(now + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=now))
    for made in (kept, gone):
        await store.create_job(made, None, now)
    await swept_before(store, now)
    # gone: its schedule ended (no next run) at a version written after its index row
    store.jobs[gone.job_id] = replace(gone, next_run_id=None, next_run_at=None, updated_at=now + timedelta(seconds=1))
    # kept: read with no next run at a version written before its index row was written again (an edit since)
    store.jobs[kept.job_id] = replace(kept, next_run_id=None, next_run_at=None, updated_at=now - timedelta(seconds=1))
    await Sweeper(Settings(), store, MemoryBus()).sweep(now)
    assert set(store.recurring) == {kept.job_id}


async def test_an_overdue_recurring_run_found_by_its_job_and_by_its_row_is_repaired_once() -> None:
    store = MemoryStore()
    made, run = job(DUE, job_definition=definition(every_s=3600, anchor=DUE))
    await store.create_job(made, run, DUE - timedelta(hours=1))
    await swept_before(store, DUE - timedelta(minutes=5))  # its row fired and was lost on its way: still there
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.REFIRE: 1}
