"""A create with an Idempotency-Key: the key names the job, so one conditional insert creates it and records the
key; a create that died after that insert is completed by its retry (issue 14)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from api.idempotency import KEYED_JOBS
from schemas.messages import DueRun
from tests.integration.api.api_bodies import once_job
from tests.integration.api.conftest import Caller
from tickwheel import metrics
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.instants import epoch_ms
from tickwheel.errors import Unavailable
from tickwheel.store import audit, buckets, jobs, runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import NewRun, RunStatus


def keyed_job_id(caller: Caller, key: str) -> uuid.UUID:
    """The id a create under `key` gives its job (api.idempotency.keyed_create)."""
    return uuid.uuid5(KEYED_JOBS, f"{caller.tenant_id}\n{key}")


def statements() -> dict[str, float]:
    return {kind: metrics.cql_statements.labels(kind)._value.get() for kind in ("lwt", "read", "write")}


async def test_a_keyed_create_is_one_conditional_write_and_leaves_no_idempotency_row(
    alice: Caller, store: CassandraStore
) -> None:
    before = statements()
    created = await alice.call("POST", "/v1/jobs", json=once_job(datetime.now(UTC) + timedelta(hours=1)),
                               headers={"Idempotency-Key": "one-lwt"})  # fmt: skip
    assert created.status == 201
    after = statements()
    assert after["lwt"] - before["lwt"] == 1
    kept = await store.execute(
        "SELECT key FROM idempotency_keys WHERE tenant_id = ? AND key = ?", [alice.tenant_id, "one-lwt"]
    )
    assert kept == []


class FailingBatches:
    """The API's store, except that its next `failing` batches, or conditional inserts of a run, fail (timeouts
    after the job's conditional insert). A failing batch first writes its statements that start with one of
    `partly` when it is a create's (an unlogged batch may apply in one partition and not in the others: run 8 of
    the soak had a job whose run was written and whose due row was not; a logged one may have applied some of its
    mutations when it times out, the batchlog replaying the rest later), then `then` runs."""

    def __init__(self, store: CassandraStore) -> None:
        self._store = store
        self.failing = 0
        self.partly: tuple[str, ...] = ()
        self.then: Callable[[], Awaitable[None]] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def _fail(self, statements: Any) -> None:
        self.failing -= 1
        for cql, params in statements:
            if cql.startswith(self.partly or ("-",)) and len(statements) > 2:
                await self._store.execute(cql, params)
        if self.then is not None:
            await self.then()
        raise Unavailable("batch timed out (injected)")

    async def batch(self, statements: Any, *, logged: bool = True) -> None:
        if self.failing:
            await self._fail(statements)
        await self._store.batch(statements, logged=logged)

    async def grouped_batch(self, statements: Any, *, logged: bool = True) -> None:
        """The create's rows fail as if their group's batch timed out."""
        if self.failing:
            await self._fail(statements)
        await self._store.grouped_batch(statements, logged=logged)

    async def applied(self, cql: str, params: Any = ()) -> Any:
        """A run's conditional insert (a completion's) fails as if it timed out before it applied."""
        if self.failing and cql.startswith("INSERT INTO runs ("):
            self.failing -= 1
            raise Unavailable("conditional insert timed out (injected)")
        return await self._store.applied(cql, params)


async def test_a_keyed_create_that_died_after_its_insert_is_completed_by_its_retry(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    flaky = FailingBatches(store)
    now = [datetime.now(UTC)]
    client = await make_client(clock=lambda: now[0], store_=flaky)
    alice = await make_tenant(client)
    body, headers = once_job(now[0] + timedelta(hours=1)), {"Idempotency-Key": "dies-once"}
    flaky.failing = 2  # its batch, and the same batch sent again
    failed = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert failed.status == 503
    now[0] += timedelta(seconds=1)  # at the same instant the job row would be the retry's own write
    early = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert early.status == 409  # the first request may still be writing: try again
    now[0] += timedelta(seconds=11)
    retried = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert retried.status == 201 and retried.headers["Idempotent-Replayed"] == "true"
    job = await retried.json()
    run = await runs.get_run(store, uuid.UUID(job["next_run_id"]))
    assert run is not None and run.status == "SCHEDULED"
    listed = await (await alice.call("GET", "/v1/jobs")).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]]
    other = await alice.call("POST", "/v1/jobs", json={**body, "name": "other"}, headers=headers)
    assert other.status == 422 and (await other.json())["field"] == "Idempotency-Key"


async def due_rows(store: CassandraStore, run: NewRun) -> list[DueRun]:
    """The run's first-attempt rows in its minute bucket: what makes the dispatcher fire it."""
    found = await buckets.read_range(store, run.shard, run.fire_at, run.fire_at + timedelta(milliseconds=1))
    return [due for due in found if due.run_id == run.run_id and due.attempt == 0 and due.kind == "run"]


async def created_run(store: CassandraStore, job_id: str) -> NewRun:
    """The first run of the job `job_id` as its create wrote it (its identity, from the job row)."""
    job = await jobs.get_job(store, uuid.UUID(job_id))
    assert job is not None and job.next_run_at is not None
    return jobs.run_of(job, job.next_run_at, retention_s=RUN_RETENTION_S)


async def test_a_keyed_create_whose_run_was_written_without_its_due_row_gets_it_from_its_retry(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    """Run 8 of the soak: the job's insert applied, its unlogged batch wrote the run row and not the due row, and
    the retry with the same key found the run and answered without the due row (fired by the sweeper 356 s
    late; the sweeper no longer reads every job, so nothing else would find it). The retry writes the run's rows
    again while it is SCHEDULED."""
    flaky = FailingBatches(store)
    client = await make_client(store_=flaky)
    alice = await make_tenant(client)
    body, headers = once_job(datetime.now(UTC) + timedelta(minutes=10)), {"Idempotency-Key": "half-written"}
    flaky.failing, flaky.partly = 2, ("INSERT INTO runs (",)
    failed = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert failed.status == 503
    run = await created_run(store, str(keyed_job_id(alice, "half-written")))  # its insert applied
    assert await runs.get_run(store, run.run_id) is not None and await due_rows(store, run) == []  # half written
    retried = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert retried.status == 201 and retried.headers["Idempotent-Replayed"] == "true"
    assert [due.fire_at_ms for due in await due_rows(store, run)] == [epoch_ms(run.fire_at)]
    history = await store.execute("SELECT status FROM runs_by_job WHERE job_id = ?", [run.job_id])
    assert [row["status"] for row in history] == ["SCHEDULED"]
    listed = await (await alice.call("GET", "/v1/jobs")).json()
    assert [j["id"] for j in listed["items"]] == [str(run.job_id)]


async def test_a_keyed_create_whose_batch_failed_once_writes_its_rows_again_and_answers_201(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    flaky = FailingBatches(store)
    client = await make_client(store_=flaky)
    alice = await make_tenant(client)
    flaky.failing, flaky.partly = 1, ("INSERT INTO runs (",)
    created = await alice.call("POST", "/v1/jobs", json=once_job(datetime.now(UTC) + timedelta(minutes=10)),
                               headers={"Idempotency-Key": "sent-again"})  # fmt: skip
    assert created.status == 201 and "Idempotent-Replayed" not in created.headers
    run = await created_run(store, (await created.json())["id"])
    assert len(await due_rows(store, run)) == 1


async def test_a_create_writing_its_rows_again_does_not_move_back_a_run_claimed_meanwhile(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    """The batch applied in part (the run row and its due row), the run fired and was claimed, then the create
    wrote its rows again: the run stays RUNNING (its runs row sent again as the batch has it, a plain insert, would
    have made it SCHEDULED at attempt 0 under a worker calling it)."""
    flaky = FailingBatches(store)
    client = await make_client(store_=flaky)
    alice = await make_tenant(client)

    async def claimed_meanwhile() -> None:
        run = await created_run(store, str(keyed_job_id(alice, "claimed-meanwhile")))
        now = datetime.now(UTC)
        assert (await runs.claim(store, run, 0, "worker-m", now + timedelta(seconds=60), now)).applied

    flaky.failing, flaky.partly = 1, ("INSERT INTO runs (", "INSERT INTO runs_by_bucket")
    flaky.then = claimed_meanwhile
    created = await alice.call("POST", "/v1/jobs", json=once_job(datetime.now(UTC) + timedelta(minutes=10)),
                               headers={"Idempotency-Key": "claimed-meanwhile"})  # fmt: skip
    assert created.status == 201
    run = await created_run(store, (await created.json())["id"])
    found = await runs.get_run(store, run.run_id)
    assert found is not None and (found.status, found.attempt, found.worker) == (RunStatus.RUNNING, 1, "worker-m")


async def test_a_replay_never_moves_a_run_back(
    make_client: Callable[..., Awaitable[TestClient]], make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:  # fmt: skip
    """A replay rewrites a first run's rows only while it is SCHEDULED: a run claimed since keeps its status."""
    client = await make_client()
    alice = await make_tenant(client)
    body, headers = once_job(datetime.now(UTC) + timedelta(minutes=10)), {"Idempotency-Key": "claimed-since"}
    created = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert created.status == 201
    run = await created_run(store, (await created.json())["id"])
    now = datetime.now(UTC)
    assert (await runs.claim(store, run, 0, "worker-r", now + timedelta(seconds=60), now)).applied
    replayed = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert replayed.status == 201 and replayed.headers["Idempotent-Replayed"] == "true"
    found = await runs.get_run(store, run.run_id)
    assert found is not None and (found.status, found.attempt, found.worker) == (RunStatus.RUNNING, 1, "worker-r")
    history = await store.execute("SELECT status, attempt FROM runs_by_job WHERE job_id = ?", [run.job_id])
    assert [(row["status"], row["attempt"]) for row in history] == [("RUNNING", 1)]


async def test_a_create_writes_its_audit_row_in_its_own_batch(alice: Caller, store: CassandraStore) -> None:
    kinds = ("lwt", "write", "batch_logged", "batch_unlogged")
    for headers, batch in (({}, "batch_logged"), ({"Idempotency-Key": "audited"}, "batch_logged")):
        before = {kind: metrics.cql_statements.labels(kind)._value.get() for kind in kinds}
        created = await alice.call("POST", "/v1/jobs", json=once_job(datetime.now(UTC) + timedelta(hours=1)),
                                   headers=headers)  # fmt: skip
        assert created.status == 201
        spent = {kind: metrics.cql_statements.labels(kind)._value.get() - before[kind] for kind in kinds}
        assert spent == {"lwt": 1 if headers else 0, "write": 0, "batch_logged": 0, "batch_unlogged": 0, batch: 1}
        changes, _ = await audit.job_changes(store, uuid.UUID((await created.json())["id"]), limit=5)
        assert [(c.action, c.version, c.tenant_id) for c in changes] == [("create", 1, alice.tenant_id)]
