"""A once job's first attempt is claimed without reading its job (issue 14): its due row carries the definition at
the version the run was made for, and every change of the job marks the run before its own write, so the claim is
refused (and the run read for) once a change has begun. Against the in-memory twin, which counts the store calls
a run costs (`Counted`); the Cassandra side of the claim and the mark is in tests/integration/store/test_contract.py."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

from schemas.messages import HttpTarget, RetryDoc, decode_definition
from tests.factories import definition, job
from tests.unit.worker.test_pipeline_decisions import NOW, TENANT, Scene, Target
from tickwheel.errors import Unavailable
from tickwheel.store import runs
from tickwheel.store.buckets import due_run_for
from tickwheel.store.jobs import CARRIED_DEFINITION_BYTES, occurrence_run
from tickwheel.store.memory_api import MemoryApiStore
from tickwheel.store.records import JobChange, JobHead, JobState, NewRun, RunKind, RunStatus, Tenant, Transition
from worker.targets import CallResult

ONCE = definition(every_s=None, anchor=NOW, retry_policy=RetryDoc(max_attempts=3, base_delay_s=2, jitter=0))


class Counted(MemoryApiStore):
    """The twin, counting the calls the worker's execution path makes: each is one statement on Cassandra
    (`read_state` the job read, `claim` and `finish` the two LWTs with their batches)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()

    async def read_state(self, job_id: uuid.UUID) -> JobHead | None:
        self.calls["read_state"] += 1
        return await super().read_state(job_id)

    async def get_run(self, run_id: uuid.UUID) -> Any:
        self.calls["get_run"] += 1
        return await super().get_run(run_id)

    async def claim(self, *args: Any, **kwargs: Any) -> Transition:
        self.calls["claim"] += 1
        return await super().claim(*args, **kwargs)

    async def finish(self, *args: Any, **kwargs: Any) -> bool:
        self.calls["finish"] += 1
        return await super().finish(*args, **kwargs)


class Recording(Target):
    """A target that notes the URL of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    async def call(self, target: HttpTarget, body: bytes, headers: Mapping[str, str]) -> CallResult:
        self.urls.append(target.url)
        return await super().call(target, body, headers)


def scene() -> tuple[Scene, Counted]:
    made = Scene(Recording())
    store = Counted()
    store.tenants[TENANT] = Tenant(TENANT, "tenant", NOW, ("whsec_dGVzdA==",))
    made.store = store
    return made, store


async def once_job(store: Counted) -> tuple[Any, NewRun]:
    made, run = job(NOW, tenant_id=TENANT, job_definition=ONCE)
    await store.create_job(made, run, NOW)
    store.calls.clear()
    return made, run


def fired(store: Counted, run: NewRun) -> Any:
    """The due row of the run's first attempt as the dispatcher reads and fires it."""
    (due,) = [d for rows in store.due_rows.values() for d in rows.values() if d.run_id == run.run_id]
    return due


def urls(made: Scene) -> list[str]:
    assert isinstance(made.target, Recording)
    return made.target.urls


async def test_a_once_jobs_first_attempt_costs_the_claim_and_the_outcome_and_no_read() -> None:
    made, store = scene()
    _, run = await once_job(store)
    await made.handler().handle(fired(store, run))
    assert made.status(run) == (RunStatus.SUCCEEDED, 1) and made.target.calls == 1
    assert store.calls == Counter({"claim": 1, "finish": 1})  # was read_state 1 + claim 1 + finish 1


async def test_only_a_once_jobs_first_attempt_carries_its_definition() -> None:
    _, run = job(NOW, tenant_id=TENANT, job_definition=ONCE)
    assert run.definition is not None and decode_definition(run.definition) == ONCE
    statement, params = runs.bucket_row(run, fire_at=NOW, attempt=0, kind=RunKind.RUN)
    assert statement == runs.INSERT_BUCKET_DEFINED and params[-1] == run.definition
    assert due_run_for(run).definition == run.definition
    later = NOW + timedelta(minutes=1)
    for kind, attempt, other in [
        (RunKind.LEASE_CHECK, 1, run),
        (RunKind.RUN, 1, run),  # a retry
        (RunKind.RUN, 0, dataclasses.replace(run, origin="trigger")),
        (RunKind.RUN, 0, job(NOW, tenant_id=TENANT)[1]),  # a recurring job's run
    ]:
        statement, _ = runs.bucket_row(other, fire_at=later, attempt=attempt, kind=kind)
        assert statement == runs.INSERT_BUCKET
        assert due_run_for(other, attempt=attempt, kind=kind.value, fire_at=later).definition is None


async def test_a_large_definition_is_not_carried_and_its_run_reads_the_job() -> None:
    made, store = scene()
    large = msgspec.structs.replace(ONCE, payload='"' + "x" * CARRIED_DEFINITION_BYTES + '"')
    created, run = job(NOW, tenant_id=TENANT, job_definition=large)
    assert run.definition is None
    await store.create_job(created, run, NOW)
    store.calls.clear()
    await made.handler().handle(fired(store, run))
    assert made.target.calls == 1 and store.calls["read_state"] == 1


async def test_a_paused_once_job_is_not_called_from_a_row_fired_before_the_pause() -> None:
    made, store = scene()
    created, run = await once_job(store)
    due = fired(store, run)
    pause = JobChange(JobState.PAUSED, ONCE, None, None)
    assert (await store.reschedule(created, pause, None, NOW, retention_s=60))[0]
    await made.handler().handle(due)
    assert made.status(run) == (RunStatus.CANCELLED, 0) and made.target.calls == 0
    # the refused claim's RUNNING history row (written before its condition) does not hide the pause's cancel
    assert [h.entry.status for h in store.history[run.job_id].values()] == [RunStatus.CANCELLED]


class CancelFails(Counted):
    """A change that dies after the job's write, before its run's cancel (the API process stopped): the first
    cancel fails."""

    failed = False

    async def cancel(self, run: NewRun, now: datetime) -> bool:
        if not self.failed:
            self.failed = True
            raise Unavailable("stopped")
        return await super().cancel(run, now)


async def test_a_pause_that_died_before_cancelling_the_run_still_keeps_it_from_being_called() -> None:
    made, _ = scene()
    store = CancelFails()
    store.tenants[TENANT] = Tenant(TENANT, "tenant", NOW, ("whsec_dGVzdA==",))
    made.store = store
    created, run = await once_job(store)
    with contextlib.suppress(Unavailable):
        await store.reschedule(created, JobChange(JobState.PAUSED, ONCE, None, None), None, NOW, retention_s=60)
    assert store.runs[run.run_id].status is RunStatus.SCHEDULED  # the job is paused, its run still scheduled
    await made.handler().handle(fired(store, run))
    assert made.target.calls == 0 and store.calls["read_state"] == 1  # the mark made the worker read the job
    assert made.status(run) == (RunStatus.CANCELLED, 0)


async def test_an_edited_once_job_is_called_with_its_new_definition_from_a_row_fired_before_the_edit() -> None:
    made, store = scene()
    created, run = await once_job(store)
    due = fired(store, run)
    edited = msgspec.structs.replace(ONCE, target=HttpTarget(url="https://example.com/edited"))
    same = occurrence_run(created.job_id, TENANT, created.shard, 2, edited, run.scheduled_at, retention_s=60)
    change = JobChange(JobState.ACTIVE, edited, same.scheduled_at, same.run_id)
    assert (await store.reschedule(created, change, same, NOW, retention_s=60))[0]
    await made.handler().handle(due)  # the row as fired before the edit: version 1, the old URL
    assert urls(made) == ["https://example.com/edited"] and made.status(run) == (RunStatus.SUCCEEDED, 1)
    assert store.calls["read_state"] == 1


async def test_a_change_refused_or_dead_before_the_jobs_write_leaves_the_run_to_run_after_a_read() -> None:
    made, store = scene()
    _, run = await once_job(store)
    await store.mark_changed(run, NOW)  # and nothing else: the job is unchanged
    await made.handler().handle(fired(store, run))
    assert urls(made) == [ONCE.target.url] and made.status(run) == (RunStatus.SUCCEEDED, 1)  # type: ignore[union-attr]
    assert store.calls["read_state"] == 1 and store.calls["claim"] == 2


class LandsLate(Counted):
    """A keyed create whose rows after its job's insert land only after a change of the job read its run (its logged
    batch timed out and the batchlog replays it): rows older than anything written since (`at_write_time`)."""

    async def write_new_run(self, run: NewRun, now: datetime) -> None:
        current = self.runs.get(run.run_id)
        await super().write_new_run(run, now)
        if current is not None:  # the change's cells are newer: the late rows do not replace them
            self.runs[run.run_id] = current


async def test_a_pause_that_finds_no_run_yet_keeps_the_run_landing_later_from_being_called() -> None:
    made, _ = scene()
    store = LandsLate()
    store.tenants[TENANT] = Tenant(TENANT, "tenant", NOW, ("whsec_dGVzdA==",))
    made.store = store
    created, run = job(NOW, tenant_id=TENANT, job_definition=ONCE)
    store.jobs[created.job_id] = created  # the job's insert applied; its run's rows not yet
    pause = JobChange(JobState.PAUSED, ONCE, None, None)
    assert (await store.reschedule(created, pause, None, NOW, retention_s=60))[0]
    await store.write_new_run(run, NOW - timedelta(seconds=1))  # the create's rows land now
    await made.handler().handle(fired(store, run))
    assert made.target.calls == 0 and made.status(run) == (RunStatus.CANCELLED, 0)


async def test_a_deleted_once_job_is_not_called() -> None:
    made, store = scene()
    created, run = await once_job(store)
    due = fired(store, run)
    gone = JobChange(JobState.DELETED, ONCE, None, None)
    assert (await store.reschedule(created, gone, None, NOW, retention_s=60))[0]
    await made.handler().handle(due)
    assert made.target.calls == 0 and made.status(run)[0] is RunStatus.CANCELLED


async def test_a_recurring_jobs_run_still_reads_its_job() -> None:
    made, store = scene()
    spec = definition(anchor=NOW, retry_policy=RetryDoc(max_attempts=3, base_delay_s=2, jitter=0))
    created, run = job(NOW, tenant_id=TENANT, job_definition=spec)
    await store.create_job(created, run, NOW)
    store.calls.clear()
    await made.handler().handle(fired(store, run))
    assert made.target.calls == 1 and store.calls["read_state"] == 1
