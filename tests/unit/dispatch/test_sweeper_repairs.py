"""The sweeper's repairs against the in-memory store and bus (no servers): a missing next run is written again,
and a run left RUNNING past its lease with nothing to fire it gets a lease check row at now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from coordinator.sweeper import Repair, Sweeper
from tests.factories import definition, job
from tickwheel.bus.memory import MemoryBus
from tickwheel.core.instants import epoch_ms
from tickwheel.settings import Settings
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import RunStatus

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
