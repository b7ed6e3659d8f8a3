"""What a Cassandra node leaving or rejoining does to one statement, injected at the adapter's boundary with the
driver (no shared server is stopped): a conditional write whose answer is lost after it applied, one that fails
before it applied, and an answer with rows of another statement's shape (seen in the nemesis soak under
overload: a 500 `KeyError: 'job_id'` on GET /v1/jobs, a 401 for a valid key, a 422 for a replayed create)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.factories import job
from tickwheel.core.instants import whole_ms
from tickwheel.errors import Unavailable
from tickwheel.settings import Settings
from tickwheel.store import jobs, runs, tenants
from tickwheel.store.cassandra import SERVER_VERSION, CassandraStore
from tickwheel.store.records import NewRun, RunStatus

Swap = Callable[[Any, Any], tuple[Any, Any] | None]


class FaultyStore(CassandraStore):
    """The real adapter on the real server, with one hook where a statement goes to the driver: `lose` names a
    statement whose next send runs but whose answer is lost (a client timeout), `refuse` one whose next send fails
    without running, and `swap` may put another statement in the place of one (a crossed answer)."""

    lose: str | None = None
    refuse: str | None = None
    swap: Swap | None = None
    sends: int = 0

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not args or fn != self._session.execute_async:
            return super()._call(fn, *args, **kwargs)
        statement = args[0]
        cql = getattr(getattr(statement, "prepared_statement", statement), "query_string", None)
        if cql is not None and cql in (self.lose, self.refuse):
            self.sends += 1
            if cql == self.lose:
                self.lose = None
                super()._call(fn, *args, **kwargs).result()  # it applies; its answer is what is lost
            else:
                self.refuse = None
            return super()._call(fn, SERVER_VERSION, timeout=0.000_001)  # a client timeout, as a node's loss gives
        if self.swap is not None and cql is not None and (swapped := self.swap(cql, args[1:])) is not None:
            return super()._call(fn, swapped[0], swapped[1], **kwargs)
        return super()._call(fn, *args, **kwargs)


@pytest.fixture
async def faulty(settings: Settings) -> AsyncIterator[FaultyStore]:
    # on the driver's own I/O thread whatever the settings: `lose` waits for its statement synchronously, which a
    # connection served by the awaiting loop (store.loop_io) could never answer
    plain = await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io="libev"))
    store = FaultyStore(plain.settings, plain._cluster, plain._session)
    yield store
    await store.close()


async def a_run(store: CassandraStore) -> NewRun:
    made, run = job(whole_ms(datetime.now(UTC) + timedelta(seconds=90)))
    await jobs.create_job(store, made, run, datetime.now(UTC))
    return run


async def test_a_claim_whose_answer_was_lost_after_it_applied_counts_as_applied(
    faulty: FaultyStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = await a_run(faulty)
    now = datetime.now(UTC)
    faulty.lose = runs.CLAIM
    with caplog.at_level(logging.INFO, logger="tickwheel.store.cassandra"):
        claimed = await runs.claim(faulty, run, 0, "worker-a", now + timedelta(seconds=60), now)
    assert faulty.sends == 1  # settled by the SERIAL read, not sent again (it would answer "not applied")
    assert claimed.applied
    found = await runs.get_run(faulty, run.run_id)
    assert found is not None and found.status is RunStatus.RUNNING and found.worker == "worker-a"
    [record] = [r for r in caplog.records if r.name == "tickwheel.store.cassandra"]
    assert record.levelno == logging.WARNING and "OperationTimedOut" in record.getMessage()  # what failed, named


async def test_a_claim_that_failed_before_it_applied_is_sent_again_and_applies(
    faulty: FaultyStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = await a_run(faulty)
    now = datetime.now(UTC)
    faulty.refuse = runs.CLAIM
    with caplog.at_level(logging.INFO, logger="tickwheel.store.cassandra"):
        claimed = await runs.claim(faulty, run, 0, "worker-b", now + timedelta(seconds=60), now)
    assert claimed.applied and faulty.sends == 1
    [record] = [r for r in caplog.records if r.name == "tickwheel.store.cassandra"]
    assert record.levelno == logging.INFO and "had not applied; sent again" in record.getMessage()
    assert "OperationTimedOut" in record.getMessage()


async def test_a_claim_lost_after_another_worker_won_is_not_taken_for_ours(faulty: FaultyStore) -> None:
    run = await a_run(faulty)
    now = datetime.now(UTC)
    assert (await runs.claim(faulty, run, 0, "worker-c", now + timedelta(seconds=60), now)).applied
    faulty.refuse = runs.CLAIM
    assert not (await runs.claim(faulty, run, 0, "worker-d", now + timedelta(seconds=60), now)).applied


async def test_a_keyed_create_whose_answer_was_lost_after_it_applied_is_created_not_a_mismatch(
    faulty: FaultyStore,
) -> None:
    made, run = job(whole_ms(datetime.now(UTC) + timedelta(seconds=90)))
    faulty.lose = jobs.INSERT_KEYED_JOB
    assert await jobs.create_keyed_job(faulty, made, run, datetime.now(UTC), "hash-1") is None  # created
    replay = await jobs.create_keyed_job(faulty, made, run, datetime.now(UTC), "hash-1")
    assert replay is not None and replay.request_hash == "hash-1"
    assert await runs.get_run(faulty, run.run_id) is not None


async def test_a_keyed_insert_answered_not_applied_with_its_own_row_is_its_create(faulty: FaultyStore) -> None:
    """Its first send applied after the SERIAL read that settled it found nothing, and the send again answered "not
    applied" with this very row: the create goes on and writes its run (it was a 409, then a replay, before)."""
    now = whole_ms(datetime.now(UTC))
    made, run = job(whole_ms(datetime.now(UTC) + timedelta(seconds=90)))
    assert await jobs.create_keyed_job(faulty, made, None, now, "hash-1") is None  # the insert alone applied
    assert await jobs.create_keyed_job(faulty, made, run, now, "hash-1") is None
    assert await runs.get_run(faulty, run.run_id) is not None


def answered_by(other: str) -> Swap:
    return lambda cql, params: (other, None) if cql.startswith("SELECT") and "system.local" not in cql else None


async def test_rows_of_another_shape_are_unavailable_not_a_missing_column(faulty: FaultyStore) -> None:
    tenant_id = f"t{uuid.uuid4().hex[:12]}"
    _, key = await tenants.create_tenant(faulty, tenant_id, datetime.now(UTC), tenant_id=tenant_id)
    faulty.swap = answered_by(SERVER_VERSION)  # one row, of one column no statement of the platform asks for
    with pytest.raises(Unavailable):
        await jobs.list_job_ids(faulty, tenant_id, limit=10)  # was KeyError: 'job_id' (a 500)
    with pytest.raises(Unavailable):
        await tenants.authenticate(faulty, key)  # was KeyError: 'revoked_at' (a 500)


async def test_no_rows_of_another_shape_are_unavailable_not_an_unknown_key(faulty: FaultyStore) -> None:
    tenant_id = f"t{uuid.uuid4().hex[:12]}"
    _, key = await tenants.create_tenant(faulty, tenant_id, datetime.now(UTC), tenant_id=tenant_id)
    nothing = "SELECT release_version FROM system.local WHERE key = 'no such row'"
    await faulty.execute(nothing)
    faulty.swap = answered_by(nothing)
    with pytest.raises(Unavailable):
        await tenants.authenticate(faulty, key)  # was None: 401 "unknown or revoked" for a valid key
    faulty.swap = None
    assert await tenants.authenticate(faulty, key) == tenant_id


async def test_a_row_of_another_key_is_unavailable_not_the_row_asked_for(faulty: FaultyStore) -> None:
    asked, other = await a_run(faulty), await a_run(faulty)
    read = "SELECT * FROM runs WHERE run_id = ?"
    crossed = (await faulty.prepare(read)).bind([other.run_id])
    faulty.swap = lambda cql, params: (crossed, None) if cql == read else None
    with pytest.raises(Unavailable):
        await runs.get_run(faulty, asked.run_id)  # was the other run's row, under this run's id
    faulty.swap = None
    found = await runs.get_run(faulty, asked.run_id)
    assert found is not None and found.run_id == asked.run_id
