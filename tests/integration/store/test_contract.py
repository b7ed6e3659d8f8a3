"""One contract for the store's ports, run against the in-memory twin and against Cassandra: the twin the unit
tests of the engine and the pipeline use cannot drift from the real thing without one of these failing (the
`ports` fixture, tests/integration/store/conftest.py; the API's ports are in test_api_contract.py).

The Cassandra side uses this run's keyspace (never skipped in CI: the `store` fixture fails there without a
server); every test makes its own job and run ids, and checkpoints on shards no dispatcher test uses.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Protocol

from tests.factories import definition, job, minute
from tickwheel.core.ids import run_id_for
from tickwheel.core.instants import epoch_ms, whole_ms
from tickwheel.store.memory import MemoryStore
from tickwheel.store.ports import (
    CoordinatorStore,
    DispatcherStore,
    FarStore,
    HistoryStore,
    ReconcilerStore,
    SweeperStore,
    WorkerStore,
)
from tickwheel.store.records import (
    AttemptResult,
    DeadLetter,
    DueKey,
    DueState,
    Found,
    NewRun,
    RunKind,
    RunStatus,
)
from tickwheel.store.sweeping import part_of
from tickwheel.store.tables import CassandraTables


class Both(
    DispatcherStore, WorkerStore, SweeperStore, ReconcilerStore, HistoryStore, FarStore, CoordinatorStore, Protocol
):
    """The ports a contract test may call."""


def soon(seconds: float = 90) -> datetime:
    return whole_ms(datetime.now(UTC) + timedelta(seconds=seconds))


async def a_run(ports: Both, at: datetime | None = None) -> NewRun:
    made, run = job(at or soon())
    await ports.create_job(made, run, datetime.now(UTC))
    return run


async def due_keys(ports: Both, run: NewRun) -> set[tuple[int, str, int]]:
    rows = await ports.read_range(run.shard, minute(run.fire_at, -2), minute(run.fire_at, 60))
    return {(r.attempt, r.kind, r.fire_at_ms) for r in rows if r.run_id == run.run_id}


async def test_a_run_written_twice_is_written_once_and_fires_at_its_time(ports: Both) -> None:
    _, run = job(soon())
    now = datetime.now(UTC)
    assert await ports.create_run(run, now)
    assert not await ports.create_run(run, now)
    stored = await ports.get_run(run.run_id)
    assert stored is not None
    assert (stored.status, stored.attempt, stored.job_version, stored.scheduled_at) == (
        RunStatus.SCHEDULED, 0, 1, run.scheduled_at,
    )  # fmt: skip
    assert await due_keys(ports, run) == {(0, "run", epoch_ms(run.fire_at))}


async def test_a_group_read_finds_the_rows_of_its_shards_between_its_instants_and_no_others(ports: Both) -> None:
    _, run = job(soon())
    since = minute(run.fire_at, 1) + timedelta(seconds=10)  # rows before it in its own minute are not found
    asked, other = random.sample(range(4096), 2), random.randrange(4096, 8192)
    rows = {  # name: (shard, fire_at, found)
        "first": (asked[0], since, True),
        "next minute": (asked[1], since + timedelta(seconds=61), True),
        "another shard": (other, since + timedelta(seconds=1), False),
        "before": (asked[1], since - timedelta(milliseconds=1), False),
        "at until": (asked[0], since + timedelta(minutes=2), False),
    }
    ids = {}
    for name, (shard, at, _) in rows.items():
        ids[name] = uuid.uuid4()
        await ports.write_due_row(dataclasses.replace(run, run_id=ids[name], shard=shard), at, 0, RunKind.RUN)
    found = await ports.read_shards(asked, since, since + timedelta(minutes=2))
    mine = {(r.run_id, r.shard, r.fire_at_ms) for r in found if r.run_id in ids.values()}
    assert mine == {(ids[name], shard, epoch_ms(at)) for name, (shard, at, wanted) in rows.items() if wanted}
    names = await ports.read_keys(asked, since, since + timedelta(minutes=2))
    assert {n for n in names if n.run_id in ids.values()} == {
        DueKey(r.shard, r.run_id, r.attempt, r.kind, r.fire_at_ms, r.job_id) for r in found if r.run_id in ids.values()
    }, "the names of the rows read_shards returns, and of no others"


async def test_writing_a_finished_run_again_never_revives_it(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    assert (await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)).applied
    assert await ports.finish(run, 1, AttemptResult(RunStatus.SUCCEEDED, response_code=200), "w", now, now)
    assert not await ports.create_run(run, now)
    stored = await ports.get_run(run.run_id)
    assert stored is not None and (stored.status, stored.attempt) == (RunStatus.SUCCEEDED, 1)


async def test_a_claim_is_fenced_by_the_attempt_and_the_job_version(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    lease_until = now + timedelta(seconds=30)
    won = await ports.claim(run, 0, "w1", lease_until, now)
    assert won.applied
    again = await ports.claim(run, 0, "w2", lease_until, now)  # a re-fired duplicate
    assert not again.applied and again.found == Found(RunStatus.RUNNING, 1, 1)
    stored = await ports.get_run(run.run_id)
    assert stored is not None
    assert (stored.status, stored.attempt, stored.worker, stored.lease_until) == (
        RunStatus.RUNNING, 1, "w1", whole_ms(lease_until),
    )  # fmt: skip
    other = await a_run(ports)
    newer = dataclasses.replace(other, job_version=2)
    changed = await ports.claim(newer, 0, "w", lease_until, now)
    assert not changed.applied and changed.found == Found(RunStatus.SCHEDULED, 0, 1)


class Marking(Both, Protocol):
    """The contract's ports with the mark a change of a job leaves on its run first (`ReschedulingStore`)."""

    async def mark_changed(self, run: NewRun, now: datetime) -> None: ...


async def test_a_once_runs_due_row_carries_its_definition_and_a_mark_refuses_a_claim_that_did_not_read(
    ports: Marking,
) -> None:
    at = soon()
    made, run = job(at, job_definition=definition(every_s=None, anchor=at))
    now = datetime.now(UTC)
    await ports.create_job(made, run, now)
    rows = [r for r in await ports.read_range(run.shard, minute(at, -1), minute(at, 2)) if r.run_id == run.run_id]
    assert run.definition is not None and [(r.attempt, r.definition) for r in rows] == [(0, run.definition)]
    lease_until = now + timedelta(seconds=30)
    await ports.mark_changed(run, now)
    refused = await ports.claim(run, 0, "w", lease_until, now, unchanged=True)
    assert not refused.applied and refused.found == Found(RunStatus.SCHEDULED, 0, 1, changed=True)
    newer = await ports.claim(dataclasses.replace(run, job_version=2), 0, "w", lease_until, now)
    assert not newer.applied and newer.found == Found(RunStatus.SCHEDULED, 0, 1)  # changed_at not in its condition
    assert (await ports.claim(run, 0, "w", lease_until, now)).applied  # a claim after a read of the job
    lease_checks = await ports.read_range(run.shard, minute(lease_until), minute(lease_until, 1))
    assert all(r.definition is None for r in lease_checks if r.run_id == run.run_id)
    other_made, other = job(at, job_definition=definition(every_s=None, anchor=at))
    await ports.create_job(other_made, other, now)
    assert (await ports.claim(other, 0, "w", lease_until, now, unchanged=True)).applied  # not marked
    recurring = await a_run(ports)
    assert {r.definition for r in await ports.read_range(recurring.shard, minute(at, -1), minute(at, 2))
            if r.run_id == recurring.run_id} == {None}  # fmt: skip
    _, absent = job(at, job_definition=definition(every_s=None, anchor=at))
    await ports.mark_changed(absent, now)  # no row yet (its create's rows may still land): written CANCELLED
    marked = await ports.get_run(absent.run_id)
    assert marked is not None and (marked.status, marked.attempt, marked.changed_at) == (
        RunStatus.CANCELLED, 0, whole_ms(now),
    )  # fmt: skip
    assert not await ports.create_run(absent, now)  # a finished run is never revived by writing it again


async def test_a_claim_of_a_run_with_no_row_finds_nothing(ports: Both) -> None:
    _, run = job(soon())
    now = datetime.now(UTC)
    refused = await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)
    assert not refused.applied and refused.found == Found()
    assert await ports.get_run(run.run_id) is None


async def test_a_claim_writes_its_lease_check_row_before_its_condition(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    lease_until = whole_ms(now + timedelta(seconds=30))
    assert (await ports.claim(run, 0, "w", lease_until, now)).applied
    assert not (await ports.claim(run, 0, "w", lease_until + timedelta(seconds=1), now)).applied
    lease_checks = {key for key in await due_keys(ports, run) if key[1] == "lease_check"}
    assert lease_checks == {(1, "lease_check", epoch_ms(lease_until)), (1, "lease_check", epoch_ms(lease_until) + 1000)}


async def test_only_the_attempt_holding_the_run_records_its_outcome(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)
    retry_at = whole_ms(now + timedelta(seconds=5))
    retry = AttemptResult(RunStatus.RETRY, response_code=503, error="HTTP 503", retry_at=retry_at)
    assert not await ports.finish(run, 2, retry, "stale", now, now)
    assert await ports.finish(run, 1, retry, "w", now, now)
    assert await ports.finish(run, 1, retry, "w", now, now)  # its own write whose reply was lost
    assert not await ports.finish(run, 1, AttemptResult(RunStatus.SUCCEEDED), "w", now, now)
    stored = await ports.get_run(run.run_id)
    assert stored is not None
    assert (stored.status, stored.attempt, stored.due_at, stored.lease_until, stored.last_error) == (
        RunStatus.RETRY, 1, retry_at, None, "HTTP 503",
    )  # fmt: skip
    assert (1, "run", epoch_ms(retry_at)) in await due_keys(ports, run)
    calls = [(a.attempt, a.kind, a.outcome, a.response_code) for a in await ports.get_attempts(run.run_id)]
    assert calls == [(1, "call", "RETRY", 503)] * 2
    assert (await ports.claim(run, 1, "w", now + timedelta(seconds=30), now)).applied  # the retry's claim


async def test_a_lease_times_out_only_once_it_has_passed(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)
    assert not await ports.lease_lapsed(run.run_id, 1, now)
    assert not await ports.expire_lease(run, 1, now + timedelta(seconds=1), now)
    later = now + timedelta(seconds=31)
    assert await ports.lease_lapsed(run.run_id, 1, later)
    assert not await ports.lease_lapsed(run.run_id, 2, later)
    assert not await ports.expire_lease(run, 2, None, later)
    assert await ports.expire_lease(run, 1, None, later)
    stored = await ports.get_run(run.run_id)
    assert stored is not None and (stored.status, stored.last_error) == (RunStatus.DEAD, "lease expired")
    assert [(a.kind, a.outcome) for a in await ports.get_attempts(run.run_id)] == [("lease_expired", "DEAD")]


async def test_a_deferral_spends_no_attempt_and_a_cancel_only_stops_a_run_not_started(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    until = whole_ms(now + timedelta(seconds=40))
    await ports.defer(run, 0, until, "rate", now)
    assert (0, "run", epoch_ms(until)) in await due_keys(ports, run)
    assert [(a.kind, a.error) for a in await ports.get_attempts(run.run_id)] == [("deferred", "rate")]
    assert await ports.cancel(run, now)
    assert not await ports.cancel(run, now)
    assert not (await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)).applied
    running = await a_run(ports)
    await ports.claim(running, 0, "w", now + timedelta(seconds=30), now)
    assert not await ports.cancel(running, now)


async def test_a_job_pointer_moves_only_from_the_run_it_names(ports: Both) -> None:
    made, run = job(soon())
    now = datetime.now(UTC)
    await ports.create_job(made, run, now)
    following = dataclasses.replace(run, run_id=uuid.uuid4())
    stray = await ports.move_pointer(made, uuid.uuid4(), following, 1, now)
    assert (stray.applied, stray.next_run_id, stray.version) == (False, run.run_id, 1)
    assert (await ports.move_pointer(made, run.run_id, following, 1, now)).applied
    again = await ports.move_pointer(made, run.run_id, following, 1, now)  # a re-fire
    assert (again.applied, again.next_run_id, again.version) == (False, following.run_id, 1)
    moved = await ports.get_job(made.job_id)
    assert moved is not None and (moved.next_run_id, moved.fired_count) == (following.run_id, 1)
    head = await ports.read_state(made.job_id)
    assert head is not None and (head.state, head.version, head.definition) == (made.state, 1, made.definition)
    assert await ports.read_state(uuid.uuid4()) is None


async def test_runs_in_flight_before_an_occurrence_are_counted_from_their_run_rows(ports: Both) -> None:
    made, first = job(soon(-600))
    now = datetime.now(UTC)
    await ports.create_job(made, first, now)
    runs = [first]
    for k in (1, 2):
        at = first.scheduled_at + timedelta(minutes=k)
        nxt = dataclasses.replace(first, run_id=run_id_for(made.job_id, at), scheduled_at=at, fire_at=at)
        await ports.create_run(nxt, now)
        runs.append(nxt)
    await ports.claim(runs[0], 0, "w", now + timedelta(seconds=30), now)
    await ports.finish(runs[0], 1, AttemptResult(RunStatus.SUCCEEDED), "w", now, now)
    await ports.claim(runs[1], 0, "w", now + timedelta(seconds=30), now)  # still running
    assert await ports.earlier_in_flight(made.job_id, runs[2].scheduled_at) == 1
    assert await ports.earlier_in_flight(made.job_id, runs[1].scheduled_at) == 0
    assert await ports.earlier_in_flight(made.job_id, runs[2].scheduled_at + timedelta(seconds=1)) == 2


async def test_a_checkpoint_moves_only_under_an_epoch_at_least_as_new(ports: Both) -> None:
    shard = random.randrange(100_000, 2**31 - 1)  # beyond any shard a dispatcher test owns
    at = whole_ms(datetime.now(UTC))
    assert await ports.advance_checkpoints({shard: at}, 2, "a", at) == {shard: True}
    assert await ports.advance_checkpoints({shard: at + timedelta(seconds=5)}, 1, "stale", at) == {shard: False}
    assert await ports.advance_checkpoints({shard: at + timedelta(seconds=9)}, 2, "a", at) == {shard: True}
    [mark] = (await ports.read_checkpoints([shard, shard + 1])).values()
    assert (mark.shard, mark.fired_through, mark.owner_epoch, mark.owner) == (shard, at + timedelta(seconds=9), 2, "a")


async def test_a_tenant_with_no_row_has_no_secret_and_the_default_prefix(ports: Both) -> None:
    tenant = await ports.call_settings(f"t{uuid.uuid4().hex[:12]}")
    assert tenant.signing_secrets == () and tenant.topic_prefix.startswith(tenant.tenant_id)


async def test_what_the_sweeper_reads_and_repairs(ports: Both) -> None:
    made, run = job(soon(-300))
    now = datetime.now(UTC)
    await ports.create_job(made, run, now)
    found, cursor = [], None
    while True:  # the whole table, page by page, until this test's job shows up
        page, cursor = await ports.scan_jobs(page_size=50, cursor=cursor)
        found += [j for j in page if j.job_id == made.job_id]
        if found or cursor is None:
            break
    assert [(j.next_run_id, j.state) for j in found] == [(run.run_id, made.state)]
    assert await ports.due_states([run.run_id]) == {run.run_id: DueState(RunStatus.SCHEDULED, 0, run.fire_at)}
    assert not await ports.move_due(run, RunStatus.RETRY, 0, now, now)
    assert await ports.move_due(run, RunStatus.SCHEDULED, 0, whole_ms(now), now)
    assert await ports.due_states([run.run_id]) == {run.run_id: DueState(RunStatus.SCHEDULED, 0, whole_ms(now))}
    await ports.write_due_row(run, whole_ms(now), 0, RunKind.LEASE_CHECK)
    rows = await ports.read_range(run.shard, minute(now), minute(now, 1))
    assert (run.run_id, 0, "lease_check") in {(r.run_id, r.attempt, r.kind) for r in rows}
    lease_until = whole_ms(now + timedelta(minutes=1))
    assert (await ports.claim(run, 0, "w", lease_until, now)).applied
    assert await ports.due_states([run.run_id]) == {
        run.run_id: DueState(RunStatus.RUNNING, 1, whole_ms(now), lease_until)
    }  # the lease too: a run stranded RUNNING is judged by it
    await ports.add_sweep({"missing_run": 1})


async def test_the_recurring_jobs_index_and_the_sweepers_mark(ports: Both) -> None:
    """A recurring job's create puts it in the index (a once job's does not); forgetting it as of a version
    written before its row keeps the row, as of a version written after drops it; the mark reads back."""
    now = datetime.now(UTC)
    recurring, _ = job(soon())
    once, _ = job(soon(), job_definition=definition(every_s=None, anchor=soon()))
    await ports.create_job(recurring, None, now)
    await ports.create_job(once, None, now)
    part = part_of(recurring.shard)
    assert recurring.job_id in await ports.recurring_jobs(part)
    assert once.job_id not in await ports.recurring_jobs(part_of(once.shard))
    await ports.forget_recurring(dataclasses.replace(recurring, updated_at=whole_ms(now - timedelta(seconds=30))))
    assert recurring.job_id in await ports.recurring_jobs(part)  # its row is newer than the version read
    await ports.forget_recurring(dataclasses.replace(recurring, updated_at=whole_ms(now + timedelta(seconds=30))))
    assert recurring.job_id not in await ports.recurring_jobs(part)
    name = f"contract-{uuid.uuid4().hex[:8]}"
    assert await ports.swept_through(name) is None
    await ports.mark_swept(name, minute(now))
    assert await ports.swept_through(name) == minute(now)


async def test_the_recurring_jobs_index_is_written_together_and_read_a_page_at_a_time(ports: Both) -> None:
    """Jobs put in the index together (the sweeper's first pass) are each there; walking a partition page by page
    (the reconciler) finds each id of the partition once, and the cursor of its last page is None."""
    made = [job(soon())[0] for _ in range(40)]
    await ports.mark_all_recurring(made)
    for part in {part_of(j.shard) for j in made}:
        walked: list[uuid.UUID] = []
        cursor: str | None = None
        pages = 0
        while True:
            ids, cursor = await ports.recurring_page(part, page_size=7, cursor=cursor)
            assert len(ids) <= 7
            walked.extend(ids)
            pages += 1
            if cursor is None:
                break
        assert len(walked) == len(set(walked)), "no id twice"
        assert set(walked) == set(await ports.recurring_jobs(part))
        assert {j.job_id for j in made if part_of(j.shard) == part} <= set(walked)
        assert pages >= len(walked) // 7


async def test_a_dead_letter_stamps_its_run(ports: Both) -> None:
    run = await a_run(ports)
    dead_at = whole_ms(datetime.now(UTC))
    attempts = ({"attempt": 1, "outcome": "DEAD"},)
    letter = DeadLetter(run.tenant_id, dead_at, run.run_id, run.job_id, "example.com", b"{}", "HTTP 500", attempts)
    await ports.add_dead_letter(letter, 3600, run.retention_s)
    stored = await ports.get_run(run.run_id)
    assert stored is not None and stored.dead_at == dead_at


async def test_a_far_run_waits_in_its_day_until_moved_and_a_cancelled_one_is_dropped(ports: Both) -> None:
    now = datetime.now(UTC)
    made, run = job(whole_ms(now + timedelta(days=9)))
    await ports.create_job(made, run, now)
    day = run.fire_at.replace(hour=0, minute=0, second=0, microsecond=0)
    assert run.run_id in [r.run_id for r in await ports.read_far_day(day, run.shard)]
    assert await due_keys(ports, run) == set()  # not in a minute bucket yet
    mover_now = run.fire_at - timedelta(days=2)
    assert await ports.move_far_run(run, mover_now)
    assert await due_keys(ports, run) == {(0, "run", epoch_ms(run.fire_at))}
    cancelled = await a_run(ports, whole_ms(now + timedelta(days=9)))
    assert await ports.cancel(cancelled, now)
    assert not await ports.move_far_run(cancelled, mover_now)
    await ports.delete_far_day(day, run.shard)
    assert await ports.read_far_day(day, run.shard) == []


async def test_the_previous_status_of_a_job_is_its_latest_earlier_run(ports: Both) -> None:
    made, first = job(soon(-120))
    now = datetime.now(UTC)
    await ports.create_job(made, first, now)
    assert await ports.previous_status(made.job_id, first.scheduled_at) is None
    await ports.claim(first, 0, "w", now + timedelta(seconds=30), now)
    await ports.finish(first, 1, AttemptResult(RunStatus.DEAD, error="HTTP 500"), "w", now, now)
    assert await ports.previous_status(made.job_id, first.scheduled_at + timedelta(minutes=1)) == "DEAD"


async def test_a_claim_refused_by_a_run_cancelled_before_its_occurrence_leaves_it_cancelled_in_history(
    ports: Both,
) -> None:
    made, run = job(soon(-120))
    now = datetime.now(UTC)
    await ports.create_job(made, run, now - timedelta(minutes=5))
    assert await ports.cancel(run, now - timedelta(minutes=4))  # a pause before the run was due
    refused = await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)  # its due row fired anyway
    assert not refused.applied and refused.found.status is RunStatus.CANCELLED
    assert await ports.previous_status(made.job_id, run.scheduled_at + timedelta(minutes=1)) == "CANCELLED"


async def test_what_the_coordinator_reads_the_highest_epoch_and_the_rows_due_per_minute(ports: Both) -> None:
    shard = random.randrange(100_000, 2**31 - 1)
    epoch = await ports.highest_epoch() + 1
    now = datetime.now(UTC)
    await ports.advance_checkpoints({shard: now}, epoch, "a", now)
    try:
        assert await ports.highest_epoch() == epoch
    finally:
        if isinstance(ports, CassandraTables):  # later tests of this run must not inherit a higher floor
            await ports.cql.execute("DELETE FROM shard_checkpoints WHERE shard = ?", [shard])
    at = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(minutes=random.randrange(500_000))
    _, run = job(at)
    await ports.write_due_row(run, at + timedelta(seconds=10), 0, RunKind.RUN)
    await ports.write_due_row(run, at + timedelta(seconds=70), 1, RunKind.RUN)
    await ports.write_due_row(run, at + timedelta(seconds=71), 1, RunKind.LEASE_CHECK)
    assert await ports.due_per_minute(at, 3, 1024) == [1, 2, 0]


async def test_what_the_reconciler_reads_the_occurrences_recorded_in_a_window(ports: Both) -> None:
    made, first = job(soon(-600))
    now = datetime.now(UTC)
    await ports.create_job(made, first, now)
    second_at = first.scheduled_at + timedelta(minutes=1)
    second = dataclasses.replace(first, run_id=run_id_for(made.job_id, second_at), scheduled_at=second_at)
    await ports.create_run(dataclasses.replace(second, fire_at=second_at), now)
    window = (first.scheduled_at - timedelta(seconds=1), second_at)
    assert await ports.scheduled_between(made.job_id, *window) == [second_at, first.scheduled_at]
    assert await ports.scheduled_between(made.job_id, first.scheduled_at, second_at) == [second_at]
    assert await ports.version_started_at(made.job_id, 1) is None  # no change recorded in the audit log


async def test_an_outcome_given_its_lease_removes_the_lease_check_row(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    lease_until = whole_ms(now + timedelta(seconds=30))
    await ports.claim(run, 0, "w", lease_until, now)
    assert (1, "lease_check", epoch_ms(lease_until)) in await due_keys(ports, run)
    assert await ports.finish(run, 1, AttemptResult(RunStatus.SUCCEEDED), "w", now, now, lease_until)
    assert {key for key in await due_keys(ports, run) if key[1] == "lease_check"} == set()


async def test_an_outcome_given_its_fired_row_removes_it_and_no_other(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    assert (await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)).applied
    retry_at = whole_ms(run.fire_at + timedelta(seconds=10))
    retry = AttemptResult(RunStatus.RETRY, response_code=500, retry_at=retry_at)
    assert await ports.finish(run, 1, retry, "w", now, now, fired_at=run.fire_at)
    assert {key for key in await due_keys(ports, run) if key[1] == "run"} == {(1, "run", epoch_ms(retry_at))}
    assert (await ports.claim(run, 1, "w", now + timedelta(seconds=30), now)).applied
    assert not await ports.finish(run, 1, AttemptResult(RunStatus.SUCCEEDED), "w", now, now, fired_at=retry_at)
    assert (1, "run", epoch_ms(retry_at)) in await due_keys(ports, run), "a refused outcome removes nothing"
    assert await ports.finish(run, 2, AttemptResult(RunStatus.SUCCEEDED), "w", now, now, fired_at=retry_at)
    assert {key for key in await due_keys(ports, run) if key[1] == "run"} == set()


async def test_a_held_lease_replaces_only_the_claims_and_a_moved_lease_is_kept(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    claimed = whole_ms(now + timedelta(seconds=30))
    held = whole_ms(now + timedelta(seconds=600))
    await ports.claim(run, 0, "w", claimed, now)
    refused = await ports.hold_lease(run, 2, claimed, held, now)
    assert not refused.applied and refused.found == Found(RunStatus.RUNNING, 1)  # the condition's columns only
    applied = await ports.hold_lease(run, 1, claimed, held, now)
    assert applied.applied and applied.lease_until == held
    again = await ports.hold_lease(run, 1, claimed, held + timedelta(seconds=5), now)  # the claim's lease is gone
    assert again.applied and again.lease_until == held, "a lease already moved is kept"
    stored = await ports.get_run(run.run_id)
    assert stored is not None and stored.lease_until == held
    assert (1, "lease_check", epoch_ms(held)) in await due_keys(ports, run)


async def test_a_reported_outcome_is_fenced_once_and_lets_the_lease_check_through(ports: Both) -> None:
    run = await a_run(ports)
    now = datetime.now(UTC)
    await ports.claim(run, 0, "w", now + timedelta(seconds=300), now)
    assert not (await ports.report_completion(run, 2, "stale", now)).applied
    assert not await ports.lease_lapsed(run.run_id, 1, now)
    assert (await ports.report_completion(run, 1, "first", now)).applied
    assert await ports.lease_lapsed(run.run_id, 1, now), "a reported attempt is worth a worker's time at once"
    second = await ports.report_completion(run, 1, "second", now)
    assert not second.applied and second.found.attempt == 1 and 1 in second.found.reported
    stored = await ports.get_run(run.run_id)
    assert stored is not None and (stored.status, stored.report(1), stored.report(2)) == (
        RunStatus.RUNNING, "first", None,
    )  # fmt: skip
    assert (1, "lease_check", epoch_ms(whole_ms(now))) in await due_keys(ports, run)


THREE_DAYS_S = 3 * 86_400
KEPT_SLACK = timedelta(seconds=120)  # the test's clock vs the write's, on a loaded box


async def kept_until(ports: Both, run_id: uuid.UUID, column: str) -> datetime:
    """When `column` of the run's row expires: its TTL read from Cassandra, or what the twin noted."""
    if isinstance(ports, MemoryStore):
        kept: datetime = ports.kept_until[run_id]
        return kept
    assert isinstance(ports, CassandraTables)
    rows = await ports.cql.execute(f"SELECT TTL({column}) AS ttl FROM runs WHERE run_id = ?", [run_id])
    ttl = rows[0]["ttl"]
    return datetime.now(UTC) + timedelta(seconds=max(ttl) if isinstance(ttl, list) else ttl)  # a map: per cell


def near(at: datetime, expected: datetime) -> bool:
    return abs(at - expected) < KEPT_SLACK


async def test_every_write_of_a_run_keeps_it_for_its_retention_past_its_due_time(ports: Both) -> None:
    made, run = job(soon(), retention_s=THREE_DAYS_S)
    now = datetime.now(UTC)
    kept = timedelta(seconds=THREE_DAYS_S)
    await ports.create_job(made, run, now)
    assert near(await kept_until(ports, run.run_id, "status"), run.fire_at + kept)
    claimed = whole_ms(now + timedelta(hours=1))
    assert (await ports.claim(run, 0, "w", claimed, now)).applied
    assert near(await kept_until(ports, run.run_id, "worker"), claimed + kept), "past its lease"
    held = whole_ms(now + timedelta(hours=2))
    assert (await ports.hold_lease(run, 1, claimed, held, now)).applied
    assert near(await kept_until(ports, run.run_id, "lease_until"), held + kept)
    assert (await ports.report_completion(run, 1, "{}", now)).applied
    assert near(await kept_until(ports, run.run_id, "reported"), run.fire_at + kept)
    retry_at = whole_ms(now + timedelta(days=1))
    failed = AttemptResult(RunStatus.RETRY, error="HTTP 500", retry_at=retry_at)
    assert await ports.finish(run, 1, failed, "w", now, now)
    assert near(await kept_until(ports, run.run_id, "finished_at"), retry_at + kept), "past its retry"
    assert (await ports.claim(run, 1, "w", whole_ms(now - timedelta(seconds=1)), now)).applied
    assert await ports.expire_lease(run, 2, None, now)
    assert near(await kept_until(ports, run.run_id, "last_error"), now + kept)
    letter = DeadLetter(run.tenant_id, whole_ms(now), run.run_id, run.job_id, "example.com", b"{}", "lease", ())
    await ports.add_dead_letter(letter, 3600, run.retention_s)
    assert near(await kept_until(ports, run.run_id, "dead_at"), now + kept), "the run's retention, not the letter's"


async def test_a_repair_and_a_cancel_keep_the_run_for_its_retention(ports: Both) -> None:
    made, run = job(soon(), retention_s=THREE_DAYS_S)
    now = datetime.now(UTC)
    kept = timedelta(seconds=THREE_DAYS_S)
    await ports.create_job(made, run, now)
    later = whole_ms(now + timedelta(days=2))
    assert await ports.move_due(run, RunStatus.SCHEDULED, 0, later, now)
    assert near(await kept_until(ports, run.run_id, "due_at"), later + kept)
    assert await ports.cancel(run, now)
    assert near(await kept_until(ports, run.run_id, "finished_at"), run.fire_at + kept)


async def test_the_sweepers_reads_answer_for_every_run_and_job_asked_past_one_group(ports: Both) -> None:
    """Runs and jobs are read in `IN ?` groups (64 partitions a read): every one of more than a group gets its own
    answer, and a run or a job without a row is left out."""
    now = datetime.now(UTC)
    base = whole_ms(now - timedelta(hours=1))
    made = [job(base + timedelta(seconds=i)) for i in range(70)]
    for j, run in made:
        await ports.create_job(j, run, now)
    missing = uuid.uuid4()
    states = await ports.due_states([run.run_id for _, run in made] + [missing])
    assert states == {run.run_id: DueState(RunStatus.SCHEDULED, 0, run.fire_at) for _, run in made}
    jobs = await ports.get_jobs([j.job_id for j, _ in made] + [missing])
    assert {job_id: (j.next_run_id, j.state) for job_id, j in jobs.items()} == {
        j.job_id: (run.run_id, j.state) for j, run in made
    }
