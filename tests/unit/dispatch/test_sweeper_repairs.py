"""The sweeper's repairs against the in-memory store and bus (no servers): a missing next run is written again,
and a run left RUNNING past its lease with nothing to fire it gets a lease check row at now."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from coordinator.sweeper import Repair, Sweeper
from tests.factories import definition, job
from tickwheel.bus.memory import MemoryBus
from tickwheel.core.instants import epoch_ms
from tickwheel.settings import Settings
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import DueState, HistoryEntry, RunStatus

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


async def test_a_missing_next_run_is_written_again_at_its_time() -> None:
    store = MemoryStore()
    made, run = job(NOW + timedelta(minutes=5), job_definition=definition(every_s=300, anchor=NOW))
    await store.create_job(made, run, NOW)
    del store.runs[run.run_id]  # the process that moved the pointer died before writing the run
    assert await Sweeper(Settings(), store, MemoryBus()).sweep(NOW) == {Repair.RECREATE: 1}
    assert store.runs[run.run_id].status is RunStatus.SCHEDULED
    assert store.sweeps == 1 and store.repairs == {"missing_run": 1}


async def test_a_run_stranded_running_past_its_lease_gets_a_lease_check_at_now() -> None:
    store = MemoryStore()
    made, run = job(NOW - timedelta(minutes=10), job_definition=definition(every_s=None, anchor=NOW))
    await store.create_job(made, run, NOW - timedelta(minutes=10))
    await store.claim(run, 0, "gone", NOW - timedelta(minutes=9), NOW - timedelta(minutes=10))
    store.due_rows.clear()  # its lease check row was lost
    sweeper = Sweeper(Settings(), store, MemoryBus())
    assert await sweeper.check_stranded(made, NOW) == [Repair.LEASE_LAPSED]
    rows = await store.read_range(run.shard, NOW, NOW + timedelta(seconds=1))
    assert [(r.run_id, r.attempt, r.kind, r.fire_at_ms) for r in rows] == [
        (run.run_id, 1, "lease_check", epoch_ms(NOW))
    ]


class CountingStore(MemoryStore):
    """The twin, counting the sweeper's reads of runs and history."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, int]] = []

    async def due_states(self, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DueState]:
        self.reads.append(("due_states", len(run_ids)))
        return await super().due_states(run_ids)

    async def latest_before_each(
        self, job_ids: Sequence[uuid.UUID], before: datetime, limit: int
    ) -> dict[uuid.UUID, list[HistoryEntry]]:
        self.reads.append(("latest_before_each", len(job_ids)))
        return await super().latest_before_each(job_ids, before, limit)


async def test_a_pass_reads_the_runs_and_history_of_a_page_of_jobs_together_and_still_repairs_each() -> None:
    store = CountingStore()
    settings = Settings()
    page_size = settings.coordinator.sweep_page_size
    made = [job(NOW - timedelta(minutes=10), job_definition=definition(every_s=None, anchor=NOW)) for _ in range(7)]
    for j, run in made:
        await store.create_job(j, run, NOW - timedelta(minutes=10))
    _, stranded_run = made[3]
    await store.claim(stranded_run, 0, "gone", NOW - timedelta(minutes=9), NOW - timedelta(minutes=10))
    # Every row lost: the six SCHEDULED runs are overdue (skipped by their catch-up), the claimed one is stranded.
    store.due_rows.clear()
    assert await Sweeper(settings, store, MemoryBus()).sweep(NOW) == {Repair.SKIP_MISSED: 6, Repair.LEASE_LAPSED: 1}
    assert len(made) <= page_size  # one page: one read of each kind for the seven jobs, not two reads a job
    assert store.reads == [("due_states", 7), ("latest_before_each", 7)]
