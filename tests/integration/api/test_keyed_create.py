"""A create with an Idempotency-Key: the key names the job, so one conditional insert creates it and records the
key; a create that died after that insert is completed by its retry (issue 14)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from tests.integration.api.api_bodies import once_job
from tests.integration.api.conftest import Caller
from tickwheel import metrics
from tickwheel.core.ids import minute_bucket
from tickwheel.errors import Unavailable
from tickwheel.store import audit, runs
from tickwheel.store.cassandra import CassandraStore


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


class FailsNextBatch:
    """The API's store, except that the next batch fails (a timeout after the job's conditional insert)."""

    def __init__(self, store: CassandraStore) -> None:
        self._store = store
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def batch(self, statements: Any, *, logged: bool = True) -> None:
        if self.armed:
            self.armed = False
            raise Unavailable("batch timed out (injected)")
        await self._store.batch(statements, logged=logged)

    async def grouped_batch(self, statements: Any, *, logged: bool = True) -> None:
        """The create's rows fail as if their group's batch timed out."""
        if self.armed:
            self.armed = False
            raise Unavailable("batch timed out (injected)")
        await self._store.grouped_batch(statements, logged=logged)


async def test_a_keyed_create_that_died_after_its_insert_is_completed_by_its_retry(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    flaky = FailsNextBatch(store)
    now = [datetime.now(UTC)]
    client = await make_client(clock=lambda: now[0], store_=flaky)
    alice = await make_tenant(client)
    body, headers = once_job(now[0] + timedelta(hours=1)), {"Idempotency-Key": "dies-once"}
    flaky.armed = True
    failed = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert failed.status == 503
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


async def test_a_create_writes_its_audit_row_in_its_own_batch(alice: Caller, store: CassandraStore) -> None:
    kinds = ("lwt", "write", "batch_logged", "batch_unlogged")
    for headers, batch in (({}, "batch_logged"), ({"Idempotency-Key": "audited"}, "batch_unlogged")):
        before = {kind: metrics.cql_statements.labels(kind)._value.get() for kind in kinds}
        created = await alice.call("POST", "/v1/jobs", json=once_job(datetime.now(UTC) + timedelta(hours=1)),
                                   headers=headers)  # fmt: skip
        assert created.status == 201
        spent = {kind: metrics.cql_statements.labels(kind)._value.get() - before[kind] for kind in kinds}
        assert spent == {"lwt": 1 if headers else 0, "write": 0, "batch_logged": 0, "batch_unlogged": 0, batch: 1}
        changes, _ = await audit.job_changes(store, uuid.UUID((await created.json())["id"]), limit=5)
        assert [(c.action, c.version, c.tenant_id) for c in changes] == [("create", 1, alice.tenant_id)]


async def test_a_replay_writes_again_the_due_row_a_half_applied_create_left_out(
    alice: Caller, store: CassandraStore
) -> None:
    """The create's batch wrote the run and not its due row (soak run 8's run 356 s late): the sweeper reads due
    rows, not every job, so the key's replay writes the row again while the run has not fired."""
    body, headers = once_job(datetime.now(UTC) + timedelta(hours=1)), {"Idempotency-Key": "half-applied"}
    created = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert created.status == 201
    run = await runs.get_run(store, uuid.UUID((await created.json())["next_run_id"]))
    assert run is not None and run.due_at is not None
    key = [minute_bucket(run.due_at).replace(tzinfo=None), run.shard, run.due_at.replace(tzinfo=None), run.run_id]
    due_row = "bucket = ? AND shard = ? AND fire_at = ? AND run_id = ? AND attempt = 0 AND kind = 'run'"
    await store.execute(f"DELETE FROM runs_by_bucket WHERE {due_row}", key)
    replayed = await alice.call("POST", "/v1/jobs", json=body, headers=headers)
    assert replayed.status == 201 and replayed.headers["Idempotent-Replayed"] == "true"
    assert len(await store.execute(f"SELECT run_id FROM runs_by_bucket WHERE {due_row}", key)) == 1
