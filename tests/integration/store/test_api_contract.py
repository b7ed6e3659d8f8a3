"""The contract of the API's store ports (`ApiStore`), run on the in-memory twin and on Cassandra (the `ports`
fixture): conditional creates and updates, idempotency records, name moves, listings paged by cursor, the
heartbeat, the audit log, dead letters as the API redrives them.

Each test makes its own tenant, so listings and counts on the shared keyspace see only its own jobs.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from tests.factories import definition, job
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.instants import whole_ms
from tickwheel.store.audit import JobChangeRecord
from tickwheel.store.idempotency import Reservation
from tickwheel.store.ports import ApiStore, DeadLetterStore, KeptChange, SweeperStore
from tickwheel.store.records import AttemptResult, DeadLetter, Found, Job, JobChange, JobState, NewRun, RunStatus
from tickwheel.store.sweeping import part_of

KEPT_S = RUN_RETENTION_S  # the run retention of the runs these tests write (its TTLs: test_contract.py)

T = TypeVar("T")


class Contract(ApiStore, DeadLetterStore, SweeperStore, Protocol):
    """The API's ports, the worker's dead letter write the redrive tests start from, and the sweeper's index of
    the recurring jobs the API's writes keep."""


def a_tenant() -> str:
    return f"contract-{uuid.uuid4().hex[:10]}"


def soon(seconds: float = 120) -> datetime:
    return whole_ms(datetime.now(UTC) + timedelta(seconds=seconds))


def creation(made: Job, at: datetime) -> KeptChange:
    return JobChangeRecord(made.job_id, made.tenant_id, at, made.version, "create", "k1", [], {}), 3600


async def all_pages(read: Callable[[str | None], Awaitable[tuple[list[T], str | None]]]) -> list[list[T]]:
    """Every page `read(cursor)` gives until its cursor runs out (Cassandra may end on an empty page)."""
    pages, cursor = [], None
    while True:
        page, cursor = await read(cursor)
        pages.append(page)
        if cursor is None:
            return pages


async def test_a_keyed_create_applies_once_and_a_replay_finds_the_job_and_its_request(ports: Contract) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    assert await ports.create_keyed_job(made, run, now, "hash-1", creation(made, now)) is None
    again, _ = job(soon(600), tenant_id=made.tenant_id)
    replay = await ports.create_keyed_job(dataclasses.replace(again, job_id=made.job_id), None, now, "hash-2",
                                          creation(made, now))  # fmt: skip
    assert replay is not None and replay.request_hash == "hash-1"
    assert (replay.job.job_id, replay.job.next_run_id, replay.job.version) == (made.job_id, run.run_id, 1)
    assert (await ports.list_job_ids(made.tenant_id, limit=10))[0] == [made.job_id]
    stored = await ports.get_run(run.run_id)
    assert stored is not None and stored.status is RunStatus.SCHEDULED
    changes, _ = await ports.job_changes(made.job_id, limit=10)
    assert [(c.action, c.version, c.key_id) for c in changes] == [("create", 1, "k1")]


async def test_a_replay_completes_a_keyed_create_that_died_before_its_run_and_listing(ports: Contract) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    await ports.create_job(made, None, now)  # the job row of a keyed create whose batch failed (and a listing)
    await ports.complete_keyed_job(made, run, now)  # as its retry does once it finds the job row
    assert await ports.count_jobs(made.tenant_id) == 1
    assert (await ports.get_run(run.run_id)) is not None
    now_claimed = datetime.now(UTC)
    assert (await ports.claim(run, 0, "w", now_claimed + timedelta(seconds=30), now_claimed)).applied
    await ports.complete_keyed_job(made, run, now)  # again: the run is only written if absent
    stored = await ports.get_run(run.run_id)
    assert stored is not None and stored.status is RunStatus.RUNNING


async def test_a_replay_completing_a_keyed_create_lists_no_job_deleted_since_and_revives_no_run(
    ports: Contract,
) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    assert await ports.create_keyed_job(made, run, now, "hash-1", creation(made, now)) is None
    delete = JobChange(JobState.DELETED, made.definition, None, None)
    assert (await ports.reschedule(made, delete, None, now, retention_s=KEPT_S))[0]
    await ports.complete_keyed_job(made, run, now)  # a replay that read the job before the delete
    assert await ports.count_jobs(made.tenant_id) == 0
    stored = await ports.get_run(run.run_id)
    assert stored is not None and stored.status is RunStatus.CANCELLED


async def test_a_change_applies_only_at_the_version_it_was_read_at_and_replaces_the_scheduled_run(
    ports: Contract,
) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    await ports.create_audited_job(made, run, now, creation(made, now))
    following = dataclasses.replace(run, run_id=uuid.uuid4(), job_version=2, scheduled_at=soon(300),
                                    fire_at=soon(300))  # fmt: skip
    change = JobChange(JobState.ACTIVE, made.definition, following.scheduled_at, following.run_id)
    assert await ports.reschedule(made, change, following, now, retention_s=KEPT_S) == (True, None)
    racing = await ports.reschedule(made, change, following, now, retention_s=KEPT_S)
    assert racing == (False, 2)  # a racing change read version 1
    old, new = await ports.get_run(run.run_id), await ports.get_run(following.run_id)
    assert old is not None and old.status is RunStatus.CANCELLED
    assert new is not None and (new.status, new.job_version) == (RunStatus.SCHEDULED, 2)
    held = await ports.get_job(made.job_id)
    assert held is not None and (held.version, held.next_run_id) == (2, following.run_id)


async def test_an_edit_keeping_the_occurrence_retargets_it_and_a_resume_revives_a_cancelled_one(
    ports: Contract,
) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    await ports.create_audited_job(made, run, now, creation(made, now))
    edited = definition(anchor=run.scheduled_at, priority="urgent")
    same = dataclasses.replace(run, job_version=2, lane="urgent")
    keep = JobChange(JobState.ACTIVE, edited, run.scheduled_at, run.run_id)
    assert await ports.reschedule(made, keep, same, now, retention_s=KEPT_S) == (True, None)
    kept = await ports.get_run(run.run_id)
    assert kept is not None and (kept.status, kept.job_version, kept.lane) == (RunStatus.SCHEDULED, 2, "urgent")
    at_2 = await ports.get_job(made.job_id)
    assert at_2 is not None
    pause = JobChange(JobState.PAUSED, edited, None, None)
    assert (await ports.reschedule(at_2, pause, None, now, retention_s=KEPT_S))[0]
    paused = await ports.get_run(run.run_id)
    assert paused is not None and paused.status is RunStatus.CANCELLED
    at_3 = await ports.get_job(made.job_id)
    assert at_3 is not None and at_3.state is JobState.PAUSED
    resumed = dataclasses.replace(run, job_version=4, lane="urgent")
    assert (await ports.reschedule(at_3, keep, resumed, now, retention_s=KEPT_S))[0]
    revived = await ports.get_run(run.run_id)
    assert revived is not None and (revived.status, revived.job_version) == (RunStatus.SCHEDULED, 4)


async def test_a_listing_pages_by_cursor_filters_by_state_and_label_and_drops_a_deleted_job(ports: Contract) -> None:
    tenant, now = a_tenant(), whole_ms(datetime.now(UTC))
    made: list[Job] = []
    for i in range(5):
        spec = definition(anchor=soon(), labels={"team": "a" if i % 2 == 0 else "b"})
        one, run = job(soon(), tenant_id=tenant, job_definition=spec)
        await ports.create_audited_job(one, run, now, creation(one, now))
        made.append(one)
    pause = JobChange(JobState.PAUSED, made[0].definition, None, None)
    delete = JobChange(JobState.DELETED, made[1].definition, None, None)
    assert (await ports.reschedule(made[0], pause, None, now, retention_s=KEPT_S))[0]
    assert (await ports.reschedule(made[1], delete, None, now, retention_s=KEPT_S))[0]
    pages = await all_pages(lambda cursor: ports.list_job_ids(tenant, limit=2, cursor=cursor))
    assert all(len(page) <= 2 for page in pages)
    listed = [job_id for page in pages for job_id in page]
    assert sorted(listed) == sorted(j.job_id for j in made if j is not made[1])
    assert await ports.count_jobs(tenant) == 4
    active = [i for p in await all_pages(lambda c: ports.list_job_ids(tenant, limit=2, cursor=c, state="ACTIVE"))
              for i in p]  # fmt: skip
    assert sorted(active) == sorted(j.job_id for j in made[2:])
    team_a = [i for p in await all_pages(lambda c: ports.list_job_ids(tenant, limit=2, cursor=c, label="team=a"))
              for i in p]  # fmt: skip
    assert sorted(team_a) == sorted(j.job_id for j in (made[0], made[2], made[4]))


async def test_a_name_is_claimed_once_moved_only_from_the_job_it_names_and_released_only_by_it(
    ports: Contract,
) -> None:
    tenant, now = a_tenant(), whole_ms(datetime.now(UTC))
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert await ports.name_claim(tenant, "nightly") is None
    assert await ports.claim_name(tenant, "nightly", first, now)
    assert not await ports.claim_name(tenant, "nightly", second, now)
    claimed = await ports.name_claim(tenant, "nightly")
    assert claimed is not None and (claimed.job_id, claimed.claimed_at) == (first, now)
    assert not await ports.move_name(tenant, "nightly", second, third, now)  # it does not name `second`
    assert await ports.move_name(tenant, "nightly", first, second, now)
    assert not await ports.move_name(tenant, "nightly", first, third, now)  # a racing replacement lost
    await ports.release_name(tenant, "nightly", first)  # not its job any more: no effect
    moved = await ports.name_claim(tenant, "nightly")
    assert moved is not None and moved.job_id == second
    await ports.release_name(tenant, "nightly", second)
    assert await ports.name_claim(tenant, "nightly") is None
    assert await ports.claim_name(tenant, "nightly", third, now)


async def test_an_idempotency_key_is_reserved_once_answered_and_released_for_a_retry(ports: Contract) -> None:
    tenant, now = a_tenant(), datetime.now(UTC)
    assert await ports.reserve_key(tenant, "k", "h1", now, 3600) == Reservation(True, "h1")
    assert await ports.reserve_key(tenant, "k", "h2", now, 3600) == Reservation(False, "h1")  # in progress
    await ports.complete_key(tenant, "k", "h1", 201, '{"id": 1}', 3600)
    assert await ports.reserve_key(tenant, "k", "h1", now, 3600) == Reservation(False, "h1", 201, '{"id": 1}')
    await ports.release_key(tenant, "k")
    assert await ports.reserve_key(tenant, "k", "h3", now, 3600) == Reservation(True, "h3")
    assert await ports.reserve_key(a_tenant(), "k", "h4", now, 3600) == Reservation(True, "h4")  # per tenant


async def test_a_heartbeat_extends_only_the_holding_attempts_lease_and_never_shortens_it(ports: Contract) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    await ports.create_audited_job(made, run, now, creation(made, now))
    assert (await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)).applied
    longer = await ports.extend_lease(run.run_id, 1, now + timedelta(seconds=90), now, KEPT_S)
    assert longer.applied and longer.lease_until == now + timedelta(seconds=90)
    shorter = await ports.extend_lease(run.run_id, 1, now + timedelta(seconds=10), now, KEPT_S)
    assert shorter.applied and shorter.lease_until == now + timedelta(seconds=90)
    stale = await ports.extend_lease(run.run_id, 2, now + timedelta(seconds=120), now, KEPT_S)
    assert not stale.applied and stale.found == Found(RunStatus.RUNNING, 1)  # the condition's columns
    nothing = await ports.extend_lease(uuid.uuid4(), 1, now, now, KEPT_S)
    assert not nothing.applied and nothing.found == Found()


async def test_the_audit_log_and_the_run_history_page_newest_first(ports: Contract) -> None:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=a_tenant())
    await ports.create_audited_job(made, run, now, creation(made, now))
    for version in (2, 3, 4):
        at = now + timedelta(seconds=version)
        await ports.record_change(JobChangeRecord(made.job_id, made.tenant_id, at, version, "edit", None, [], {}), 60)
    pages = await all_pages(lambda cursor: ports.job_changes(made.job_id, limit=3, cursor=cursor))
    assert [c.version for page in pages for c in page] == [4, 3, 2, 1]
    later = dataclasses.replace(run, run_id=uuid.uuid4(), scheduled_at=soon(600), fire_at=soon(600))
    await ports.create_run(later, now)
    await ports.cancel(later, now)
    assert [e.run_id for e in await ports.latest_runs(made.job_id, 5)] == [later.run_id, run.run_id]
    history = await all_pages(lambda c: ports.runs_page(made.job_id, "CANCELLED", page_size=1, cursor=c))
    assert [(e.run_id, e.status) for page in history for e in page] == [(later.run_id, RunStatus.CANCELLED)]


async def dead_run(ports: Contract, tenant: str) -> tuple[NewRun, DeadLetter]:
    now = whole_ms(datetime.now(UTC))
    made, run = job(soon(), tenant_id=tenant)
    await ports.create_audited_job(made, run, now, creation(made, now))
    assert (await ports.claim(run, 0, "w", now + timedelta(seconds=30), now)).applied
    assert await ports.finish(run, 1, AttemptResult(RunStatus.DEAD, error="HTTP 410"), "w", now, now)
    letter = DeadLetter(tenant, now, run.run_id, run.job_id, "example.com", b"{}", "HTTP 410", ())
    await ports.add_dead_letter(letter, 3600, run.retention_s)
    return run, letter


async def test_a_dead_letter_is_found_by_its_run_redriven_once_and_purged(ports: Contract) -> None:
    tenant = a_tenant()
    run, letter = await dead_run(ports, tenant)
    assert await ports.get_dead_letter(tenant, run.run_id) == letter
    assert await ports.get_dead_letter(a_tenant(), run.run_id) is None  # another tenant's run
    listed, _ = await ports.list_dead_letters(tenant, limit=10, target_host="example.com")
    assert [d.run_id for d in listed] == [run.run_id]
    assert (await ports.list_dead_letters(tenant, limit=10, job_id=uuid.uuid4()))[0] == []
    assert await ports.dead_letters_since(tenant, letter.dead_at) == 1
    due = soon(30)
    redriven = await ports.redrive_dead_letter(letter, due, letter.dead_at, job_version=3, retention_s=KEPT_S)
    assert redriven is not None and (redriven.status, redriven.job_version) == (RunStatus.RETRY, 3)
    again = await ports.redrive_dead_letter(letter, due, letter.dead_at, job_version=3, retention_s=KEPT_S)
    assert again is None  # not DEAD now
    stored = await ports.get_run(run.run_id)
    assert stored is not None and (stored.status, stored.redrive_count, stored.dead_at) == (RunStatus.RETRY, 1, None)
    marked, _ = await ports.list_dead_letters(tenant, limit=10)
    assert [d.redriven_at for d in marked] == [letter.dead_at]
    await ports.purge_dead_letter(letter)
    assert (await ports.list_dead_letters(tenant, limit=10))[0] == []


async def indexed(ports: Contract, made: Job) -> bool:
    return made.job_id in await ports.recurring_jobs(part_of(made.shard))


async def test_a_recurring_job_is_in_the_sweepers_index_from_its_create_or_its_change_to_recurring(
    ports: Contract,
) -> None:
    now = whole_ms(datetime.now(UTC))
    tenant = a_tenant()
    keyed, keyed_run = job(soon(), tenant_id=tenant)  # an interval job
    assert await ports.create_keyed_job(keyed, keyed_run, now, "hash", creation(keyed, now)) is None
    plain, plain_run = job(soon(), tenant_id=tenant)
    await ports.create_audited_job(plain, plain_run, now, creation(plain, now))
    once, once_run = job(soon(), tenant_id=tenant, job_definition=definition(every_s=None, anchor=soon()))
    await ports.create_keyed_job(once, once_run, now, "hash", creation(once, now))
    assert (await indexed(ports, keyed), await indexed(ports, plain), await indexed(ports, once)) == (True, True, False)
    replay = dataclasses.replace(keyed, job_id=uuid.uuid4())  # a replay that died after its insert: completed
    await ports.complete_keyed_job(replay, None, now)
    assert await indexed(ports, replay)
    recurring = definition(every_s=300, anchor=soon())
    change = JobChange(JobState.ACTIVE, recurring, once.next_run_at, once.next_run_id)
    assert await ports.update_job(once, change, now) == (True, None)
    assert await indexed(ports, once)
