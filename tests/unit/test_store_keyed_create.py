"""A keyed create's rows after its job's insert (tickwheel.store.jobs, no server): one logged batch at the
create's write time, so that it is all or nothing (a batch applied in part left a run that nothing fires: soak
run 8), sent again as it was when it fails, written the same way by a replay, and, above the batch size limit,
one statement each with the run's row last."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from tests.factories import definition, job
from tickwheel.errors import BatchTooLarge, Unavailable
from tickwheel.store import audit, jobs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import Job, NewRun
from tickwheel.store.times import epoch_us

NOW = datetime(2026, 12, 2, 12, 0, 0, 123000, tzinfo=UTC)


class Recording:
    """A `CassandraStore` that records what it is sent; its job inserts apply; its first `failing` batches fail
    (the cluster did not answer), or every batch is refused as too large (`too_large`)."""

    def __init__(self, failing: int = 0, too_large: bool = False) -> None:
        self.batches: list[tuple[list[tuple[str, list[Any]]], bool]] = []
        self.statements: list[tuple[str, list[Any]]] = []
        self.conditional: list[str] = []
        self.failing = failing
        self.too_large = too_large

    async def applied(self, cql: str, params: Sequence[Any] = ()) -> tuple[bool, dict[str, Any]]:
        self.conditional.append(cql)
        return True, {"[applied]": True}

    async def execute(self, cql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        self.statements.append((cql, list(params)))
        return []

    async def batch(self, rows: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True) -> None:
        await self.grouped_batch(rows, logged=logged)

    async def grouped_batch(self, rows: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True) -> None:
        self.batches.append(([(cql, list(params)) for cql, params in rows], logged))
        if self.too_large:
            raise BatchTooLarge("injected")
        if self.failing:
            self.failing -= 1
            raise Unavailable("injected: the batch timed out")


def once_job() -> tuple[Job, NewRun]:
    at = NOW + timedelta(minutes=5)
    return job(at, job_definition=definition(every_s=None, anchor=at))


def audit_row(made: Job) -> tuple[str, list[Any]]:
    change = audit.JobChangeRecord(made.job_id, made.tenant_id, NOW, 1, "create", "k1", [], {})
    return audit.change_row(change, 3600)


async def create(store: Recording, made: Job, run: NewRun) -> None:
    assert await jobs.create_keyed_job(cast(CassandraStore, store), made, run, NOW, "hash", [audit_row(made)]) is None


async def test_the_rows_after_a_keyed_insert_are_one_logged_batch_each_at_the_creates_write_time() -> None:
    store = Recording()
    made, run = once_job()
    await create(store, made, run)
    assert store.conditional == [jobs.INSERT_KEYED_JOB], "the job's insert is the create's only condition"
    [(rows, logged)] = store.batches
    assert logged, "an unlogged batch spans partitions and can apply in part"
    tables = [cql.split()[2] for cql, _ in rows]
    assert sorted(tables) == sorted(["runs", "runs_by_bucket", "runs_by_job", "jobs_by_tenant", "job_history"])
    for cql, params in rows:
        assert "TIMESTAMP ?" in cql, cql
        if cql.split()[2] != "runs_by_job":  # the history row keeps its own write time (its occurrence or now)
            assert params[-1] == epoch_us(NOW), cql


async def test_a_batch_that_failed_is_sent_again_as_it_was_not_row_by_row() -> None:
    store = Recording(failing=1)
    made, run = once_job()
    await create(store, made, run)
    assert len(store.batches) == 2 and store.batches[0] == store.batches[1]
    assert store.conditional == [jobs.INSERT_KEYED_JOB] and store.statements == []
    twice = Recording(failing=2)
    with pytest.raises(Unavailable):  # a second failure is the caller's (a 503: the client's retry completes it)
        await create(twice, made, run)


async def test_a_replay_completing_the_create_writes_the_same_rows_at_the_same_time() -> None:
    created, replayed = Recording(), Recording()
    made, run = once_job()
    assert await jobs.create_keyed_job(cast(CassandraStore, created), made, run, NOW, "hash") is None
    await jobs.complete_keyed_job(cast(CassandraStore, replayed), made, run, NOW)
    assert replayed.batches == created.batches and replayed.conditional == []


async def test_above_the_batch_size_limit_the_runs_row_is_written_last() -> None:
    store = Recording(too_large=True)
    made, run = once_job()
    await create(store, made, run)
    tables = [cql.split()[2] for cql, _ in store.statements]
    assert tables[-1] == "runs" and tables.count("runs") == 1 and "runs_by_bucket" in tables, tables
