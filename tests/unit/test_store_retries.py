"""store.retries: which statements may be sent again, and how a conditional write is recognised in its row."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from cassandra import ConsistencyLevel, WriteType
from cassandra.cluster import ResponseFuture
from cassandra.connection import ConnectionShutdown
from cassandra.protocol import OverloadedErrorMessage

from tickwheel.errors import Unavailable
from tickwheel.store import cassandra as cassandra_adapter
from tickwheel.store import checkpoints, jobs, runs
from tickwheel.store.operator import ADD_COUNTER
from tickwheel.store.retries import RetryIdempotent, intent_of, is_idempotent, same_value

STORE = Path(__file__).resolve().parents[2] / "tickwheel" / "store"
RUN = uuid.uuid4()
NOW = datetime(2026, 12, 1, 3, 0, 0, 123_456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cql", "idempotent"),
    [
        ("SELECT * FROM runs WHERE run_id = ?", True),
        (runs.INSERT_BUCKET, True),
        (jobs.INSERT_LISTING, True),
        (runs.CLAIM, False),  # conditional: settled by a SERIAL read instead
        (runs.INSERT_RUN, False),
        (runs.INSERT_CALL_ATTEMPT, False),  # seq = now(): another row each time
        (ADD_COUNTER, False),
        ("UPDATE t SET items = items + ? WHERE k = ?", False),
        ("UPDATE t SET items = ? + items WHERE k = ?", False),
    ],
)
def test_only_statements_that_write_the_same_again_are_idempotent(cql: str, idempotent: bool) -> None:
    assert is_idempotent(cql) is idempotent


def test_a_claim_is_recognised_by_the_values_it_sets_in_its_row() -> None:
    lease = datetime(2026, 12, 1, 3, 1, tzinfo=UTC)
    intent = intent_of(runs.CLAIM, [86_400, 1, lease, "w1", NOW, RUN, 0, 3], ["run_id"])  # USING TTL ? first
    assert intent is not None
    assert intent.read == "SELECT * FROM runs WHERE run_id = ?" and intent.read_params == (RUN,)
    # the driver answers timestamps naive in UTC, to the millisecond
    row = {"status": "RUNNING", "attempt": 1, "lease_until": lease.replace(tzinfo=None), "worker": "w1",
           "started_at": datetime(2026, 12, 1, 3, 0, 0, 123_000), "run_id": RUN}  # fmt: skip
    assert intent.shows(row)
    assert not intent.shows({**row, "worker": "w2"})
    assert not intent.shows({**row, "attempt": 2})
    assert not intent.shows(None)


def test_an_outcome_with_literals_and_nulls_is_recognised() -> None:
    intent = intent_of(runs.FINISH, [86_400, "SUCCEEDED", NOW, 200, None, None, RUN, 1], ["run_id"])
    assert intent is not None and intent.read_params == (RUN,)
    row = {"status": "SUCCEEDED", "finished_at": NOW, "response_code": 200, "last_error": None, "due_at": None}
    assert intent.shows({**row, "lease_until": None})
    assert not intent.shows({**row, "lease_until": NOW})


def test_an_insert_if_not_exists_is_found_by_its_primary_key_and_literals() -> None:
    params = [RUN, uuid.uuid4(), "t", 1, 7, "default", NOW, NOW, NOW, 3600]
    intent = intent_of(runs.INSERT_RUN, params, ["run_id"])
    assert intent is not None and intent.read_params == (RUN,)
    row = dict(zip(["run_id", "job_id", "tenant_id", "job_version", "shard", "lane", "scheduled_at", "due_at"],
                   params[:8], strict=True))  # fmt: skip
    assert intent.shows({**row, "status": "SCHEDULED", "attempt": 0, "redrive_count": 0, "created_at": NOW})
    assert not intent.shows({**row, "status": "RUNNING", "attempt": 1, "redrive_count": 0, "created_at": NOW})
    assert intent_of(runs.INSERT_RUN, params, []) is None  # no primary key known: not settled, not sent again


def test_a_map_entry_a_checkpoint_and_a_conditional_delete_are_understood() -> None:
    reported = "UPDATE runs SET reported[?] = ? WHERE run_id = ? IF status = 'RUNNING' AND attempt = ?"
    intent = intent_of(reported, [2, "report", RUN, 2], ["run_id"])
    assert intent is not None and intent.shows({"reported": {2: "report"}})
    assert not intent.shows({"reported": {1: "report"}})
    advance = intent_of(checkpoints.ADVANCE, [NOW, 5, "d1", NOW, 17, 5], ["shard"])
    assert advance is not None and advance.read_params == (17,)
    deleting = intent_of("DELETE FROM jobs_by_name WHERE tenant_id = ? AND name = ? IF job_id = ?", ["t", "n", RUN], [])
    assert deleting is not None and deleting.read_params == ("t", "n")
    assert deleting.shows(None) and not deleting.shows({"job_id": RUN})


def test_values_compare_as_stored() -> None:
    assert same_value({"a=1"}, {"a=1"}) and not same_value({"a=1"}, {"a=2"})
    assert same_value(datetime(2026, 1, 1, 0, 0, 0, 5_000), datetime(2026, 1, 1, 0, 0, 0, 5_999, tzinfo=UTC))


def test_the_driver_retries_only_idempotent_statements_and_never_a_conditional_write() -> None:
    policy = RetryIdempotent(tries=2)
    read, lwt = type("S", (), {"is_idempotent": True})(), type("S", (), {"is_idempotent": False})()
    quorum = ConsistencyLevel.QUORUM
    assert policy.on_read_timeout(read, quorum, 2, 1, False, retry_num=0)[0] == policy.RETRY_NEXT_HOST
    assert policy.on_read_timeout(read, quorum, 2, 1, False, retry_num=2)[0] == policy.RETHROW
    assert policy.on_write_timeout(read, quorum, WriteType.SIMPLE, 2, 1, retry_num=0)[0] == policy.RETRY_NEXT_HOST
    assert policy.on_write_timeout(read, quorum, WriteType.CAS, 2, 1, retry_num=0)[0] == policy.RETHROW
    assert policy.on_write_timeout(lwt, quorum, WriteType.SIMPLE, 2, 1, retry_num=0)[0] == policy.RETHROW
    assert policy.on_request_error(lwt, quorum, RuntimeError("overloaded"), 0)[0] == policy.RETHROW
    assert policy.on_unavailable(lwt, quorum, 2, 1, retry_num=0)[0] == policy.RETRY_NEXT_HOST
    shutting_down = OverloadedErrorMessage(0x1001, "Server is shutting down", None)
    assert policy.on_request_error(lwt, quorum, shutting_down, 0)[0] == policy.RETRY_NEXT_HOST  # it never ran
    assert policy.on_request_error(lwt, quorum, shutting_down, 2)[0] == policy.RETHROW


class RefusingFuture:
    """A driver future whose statement a coordinator refused as it shut down."""

    def add_callbacks(self, callback: object, errback: Callable[[BaseException], None]) -> None:
        errback(OverloadedErrorMessage(0x1001, "Server is shutting down", None))


async def test_a_coordinator_refusing_as_it_shuts_down_is_unavailable_not_a_raw_driver_error() -> None:
    """Run 5 of the soak: claims refused so went up raw and their messages were dropped ("run message failed")."""
    with pytest.raises(Unavailable):
        await cassandra_adapter._await(cast(ResponseFuture, RefusingFuture()), ["127.0.0.2:29042"])


class ResetFuture:
    """A driver future whose connection the node reset while the statement was in flight (a node stopping)."""

    def add_callbacks(self, callback: object, errback: Callable[[BaseException], None]) -> None:
        errback(ConnectionShutdown("[Errno 104] Connection reset by peer"))


async def test_a_connection_reset_mid_statement_is_unavailable_not_a_raw_driver_error() -> None:
    """Run 11 of the soak: a keyed create's LWT whose node stopped went up as ConnectionShutdown, a 500."""
    with pytest.raises(Unavailable):
        await cassandra_adapter._await(cast(ResponseFuture, ResetFuture()), ["127.0.0.14:29042"])


def conditional_writes() -> list[str]:
    """Every conditional write written in the store's modules (string constants, concatenations joined)."""
    found = []
    for path in sorted(STORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" not in node.value:
                verb = node.value.lstrip().split(" ")[0].upper()
                if verb in ("UPDATE", "INSERT", "DELETE") and " IF " in node.value.upper():
                    found.append(node.value)
    return found


def test_every_conditional_write_of_the_store_can_be_settled_after_a_timeout() -> None:
    """A conditional write `intent_of` cannot read is never sent again after a failed send: a new one must be of a
    form it reads (or it would fail where the others are retried)."""
    writes = conditional_writes()
    assert len(writes) >= 20
    for cql in writes:
        first_column = [cql.split("(")[1].split(",")[0].strip()] if cql.lstrip().upper().startswith("INSERT") else []
        assert intent_of(cql, list(range(cql.count("?"))), first_column) is not None, cql
