"""Round grouping (tickwheel.store.rounds, CassandraStore.round_batch / read_in_round): the unlogged batches and the
point reads asked for in one event-loop round leave as one request after it (cut at the limits), a lone one as it
was; each caller sees its own group's outcome, and a group refused for its content is sent again caller by caller.
The worker's claim, outcome rows and job read go through them: runs handled together cost one request each."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from tickwheel.errors import Unavailable
from tickwheel.settings import CassandraSettings
from tickwheel.store import jobs, runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.grouping import Rows
from tickwheel.store.records import AttemptResult, NewRun, RunStatus
from tickwheel.store.rounds import RoundBatches, RoundReads

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def rows_of(name: str, count: int = 2) -> list[tuple[str, list[Any]]]:
    return [(f"INSERT {name} {i}", ["x"]) for i in range(count)]


class Refused(Exception):
    """What the driver raises for a statement the server refuses for its content (no `retriable`)."""


class Recorder:
    """A store's unlogged `batch`: records what it was sent; fails batches holding a row of `failing` (unavailable)
    or of `refused` (refused for its content)."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.failing: set[str] = set()
        self.refused: set[str] = set()

    async def __call__(self, rows: Rows) -> None:
        await asyncio.sleep(0)
        names = [cql for cql, _ in rows]
        self.sent.append(names)
        if any(name.split()[1] in self.failing for name in names):
            raise Unavailable("batch timed out (injected)")
        if any(name.split()[1] in self.refused for name in names):
            raise Refused("Batch too large (injected)")


async def test_batches_of_one_round_leave_as_one() -> None:
    send = Recorder()
    batches = RoundBatches(send)
    await asyncio.gather(batches.write(rows_of("a")), batches.write(rows_of("b")), batches.write(rows_of("c")))
    assert send.sent == [[*(c for c, _ in rows_of("a")), *(c for c, _ in rows_of("b")), *(c for c, _ in rows_of("c"))]]


async def test_a_lone_batch_leaves_as_it_was() -> None:
    send = Recorder()
    batches = RoundBatches(send)
    await batches.write(rows_of("a", 3))
    await batches.write(rows_of("b", 3))
    assert send.sent == [[c for c, _ in rows_of("a", 3)], [c for c, _ in rows_of("b", 3)]]


async def test_groups_are_cut_at_the_row_limit() -> None:
    """Ten rows at most: an unlogged batch over more partitions draws Cassandra's warning, logged per batch."""
    send = Recorder()
    batches = RoundBatches(send)
    await asyncio.gather(*(batches.write(rows_of(str(n), 3)) for n in range(7)))
    assert [len(sent) for sent in send.sent] == [9, 9, 3]
    assert all(len(sent) <= 10 for sent in send.sent)


async def test_a_group_the_cluster_did_not_take_fails_each_caller() -> None:
    send = Recorder()
    send.failing.add("b")
    batches = RoundBatches(send)
    results = await asyncio.gather(
        batches.write(rows_of("a")), batches.write(rows_of("b")), return_exceptions=True
    )  # fmt: skip
    assert all(isinstance(result, Unavailable) for result in results)
    assert len(send.sent) == 1  # not sent again here: each caller retries as it would its own batch


async def test_a_group_refused_for_its_content_is_sent_again_caller_by_caller() -> None:
    send = Recorder()
    send.refused.add("b")
    batches = RoundBatches(send)
    results = await asyncio.gather(
        batches.write(rows_of("a")), batches.write(rows_of("b")), batches.write(rows_of("c")), return_exceptions=True
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], Refused)
    assert len(send.sent) == 4


class Reads:
    """A table of key -> value read one key at a time (`one`) or many (`many`), recording each read."""

    def __init__(self, table: dict[str, str]) -> None:
        self.table = table
        self.reads: list[tuple[str, list[str]]] = []

    async def one(self, key: str) -> str | None:
        await asyncio.sleep(0)
        self.reads.append(("one", [key]))
        return self.table.get(key)

    async def many(self, keys: Sequence[str]) -> dict[str, str]:
        await asyncio.sleep(0)
        self.reads.append(("many", list(keys)))
        return {key: self.table[key] for key in keys if key in self.table}


async def test_reads_of_one_round_are_one_read_and_each_caller_gets_its_own() -> None:
    table = Reads({"a": "A", "b": "B"})
    reads = RoundReads(table.one, table.many)
    found = list(await asyncio.gather(reads.get("a"), reads.get("b"), reads.get("a"), reads.get("gone")))
    assert found == ["A", "B", "A", None]
    assert table.reads == [("many", ["a", "b", "gone"])]


async def test_a_lone_read_uses_the_single_read() -> None:
    table = Reads({"a": "A"})
    reads = RoundReads(table.one, table.many)
    assert await reads.get("a") == "A"
    assert list(await asyncio.gather(reads.get("a"), reads.get("a"))) == ["A", "A"]  # one key, twice: still one
    assert table.reads == [("one", ["a"]), ("one", ["a"])]


async def test_reads_are_cut_at_the_key_limit_and_a_failure_fails_its_group() -> None:
    table = Reads({str(n): str(n) for n in range(5)})
    reads = RoundReads(table.one, table.many, max_keys=2)
    assert await asyncio.gather(*(reads.get(str(n)) for n in range(5))) == [str(n) for n in range(5)]
    assert [keys for _, keys in table.reads] == [["0", "1"], ["2", "3"], ["4"]]

    async def down(keys: Sequence[str]) -> dict[str, str]:
        raise Unavailable("read timed out (injected)")

    failing = RoundReads(table.one, down)
    results = await asyncio.gather(failing.get("0"), failing.get("1"), return_exceptions=True)
    assert all(isinstance(result, Unavailable) for result in results)


# --- the worker's statements through a CassandraStore ---------------------------------------------------------


class Session:
    """The driver's session as far as the store's requests go: answers each request from `answer(cql, params)`
    and records what was sent (a batch as its statements' texts)."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.jobs: dict[uuid.UUID, dict[str, Any]] = {}

    def answer(self, statement: Any, params: Any) -> list[dict[str, Any]]:
        cql = getattr(getattr(statement, "prepared", statement), "cql", "")
        if cql.startswith("SELECT"):
            keys = params[0] if isinstance(params[0], list) else [params[0]]
            return [self.jobs[key] for key in keys if key in self.jobs]
        if "IF" in cql:
            return [{"[applied]": True}]
        return []


def store_over(session: Session) -> CassandraStore:
    """A CassandraStore whose requests go to `session` (no driver: statements are 'prepared' as their text)."""
    store = CassandraStore(CassandraSettings(), cast(Any, None), cast(Any, None))

    class Prepared:
        def __init__(self, cql: str) -> None:
            self.cql = cql
            self.is_idempotent = True

    async def prepare(cql: str) -> Any:
        return Prepared(cql)

    async def page(cql: str, params: Sequence[Any] = (), **_: Any) -> tuple[list[dict[str, Any]], None]:
        await asyncio.sleep(0)
        session.requests.append(("execute", cql))
        return session.answer(Prepared(cql), params), None

    async def batch(statements: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True) -> None:
        await asyncio.sleep(0)
        session.requests.append(("batch", [cql for cql, _ in statements]))

    store.prepare = prepare  # type: ignore[method-assign]
    store.page = page  # type: ignore[method-assign]
    store.batch = batch  # type: ignore[method-assign]
    return store


def new_run() -> NewRun:
    return NewRun(
        run_id=uuid.uuid4(), job_id=uuid.uuid4(), tenant_id="t", job_version=1, shard=1, lane="default",
        scheduled_at=NOW, fire_at=NOW, retention_s=86_400,
    )  # fmt: skip


async def test_runs_claimed_and_finished_together_write_their_rows_in_one_batch() -> None:
    session = Session()
    store = store_over(session)
    handled = [new_run() for _ in range(3)]
    lease_until = NOW + timedelta(seconds=60)
    claims = await asyncio.gather(*(runs.claim(store, run, 0, "w", lease_until, NOW) for run in handled))
    assert all(claim.applied for claim in claims)
    batches = [request for request in session.requests if request[0] == "batch"]
    assert len(batches) == 1 and len(batches[0][1]) == 6  # each claim's lease check and RUNNING rows, together
    lwts = [request for request in session.requests if request[0] == "execute"]
    assert len(lwts) == 3  # the claims themselves stay one LWT each
    assert session.requests.index(batches[0]) < session.requests.index(lwts[0])  # rows before the conditions

    session.requests.clear()
    done = AttemptResult(RunStatus.SUCCEEDED, response_code=200)
    finished = await asyncio.gather(
        *(runs.finish(store, run, 1, done, "w", NOW, NOW, lease_until) for run in handled)
    )  # fmt: skip
    assert finished == [True, True, True]
    assert [kind for kind, _ in session.requests].count("batch") == 1  # 9 rows: history, attempt, lease check delete


async def test_jobs_read_together_are_one_read() -> None:
    session = Session()
    store = store_over(session)
    ids = [uuid.uuid4() for _ in range(3)]
    for job_id in ids[:2]:
        session.jobs[job_id] = {"job_id": job_id, "state": "ACTIVE", "version": 2, "definition": DEFINITION}
    heads = await asyncio.gather(*(jobs.read_state(store, job_id) for job_id in ids))
    assert [head.job_id if head else None for head in heads] == [ids[0], ids[1], None]
    assert session.requests == [("execute", jobs.READ_STATES)]
    assert await jobs.read_state(store, ids[0]) is not None  # alone: the read by key, as before
    assert session.requests[-1] == ("execute", jobs.READ_STATE)


async def test_a_grouped_read_answering_a_key_not_asked_for_is_refused() -> None:
    session = Session()
    store = store_over(session)
    stranger = uuid.uuid4()
    session.jobs[stranger] = {"job_id": stranger, "state": "ACTIVE", "version": 1, "definition": DEFINITION}
    asked = [uuid.uuid4(), uuid.uuid4()]
    session.answer = lambda statement, params: [session.jobs[stranger]]  # type: ignore[method-assign]
    with pytest.raises(Unavailable):
        await asyncio.gather(*(jobs.read_state(store, job_id) for job_id in asked))


DEFINITION = (
    '{"name":"j","schedule":{"type":"once","runAt":"2026-12-02T12:00:00Z"},'
    '"target":{"type":"http","url":"http://127.0.0.1:9/"}}'
)
