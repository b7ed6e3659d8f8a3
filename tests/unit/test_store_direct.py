"""What the store's direct path (store.direct) does with each kind of answer, on a stand-in for the driver's pool
and connection: an answer it may use, one the driver's path must send again, one raised as the driver raises it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from cassandra import ConsistencyLevel, InvalidRequest, OperationTimedOut, WriteTimeout, WriteType
from cassandra.connection import ConnectionShutdown
from cassandra.protocol import (
    RESULT_KIND_ROWS,
    RESULT_KIND_VOID,
    InvalidRequestException,
    OverloadedErrorMessage,
    PreparedQueryNotFound,
    ReadTimeoutErrorMessage,
    ResultMessage,
    UnavailableErrorMessage,
    WriteTimeoutErrorMessage,
)
from cassandra.query import BatchStatement, dict_factory

from tickwheel.store.direct import DirectRequests, Resend

HOST = "node-1"


class _Connection:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._requests: dict[int, Any] = {}
        self.orphaned_request_ids: set[int] = set()
        self.orphaned_threshold = 2
        self.orphaned_threshold_reached = False
        self.sent: list[Any] = []

    def send_msg(self, message: Any, request_id: int, cb: Any, **_: Any) -> int:
        self._requests[request_id] = (cb, None, None)
        self.sent.append(message)
        return 1

    def answer(self, response: Any) -> None:
        cb, _, _ = self._requests.pop(1)
        cb(response)


class _Pool:
    is_shutdown = False

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection
        self.returned: list[bool] = []

    def borrow_connection(self, **_: Any) -> tuple[_Connection, int]:
        return self.connection, 1

    def return_connection(self, connection: _Connection, stream_was_orphaned: bool = False) -> None:
        self.returned.append(stream_was_orphaned)


class _Cluster:
    @staticmethod
    def timestamp_generator() -> int:
        return 1_700_000_000_000_000


class _Handler:
    encode_message = decode_message = None


class _Session:
    keyspace = "ks"
    use_client_timestamp = True
    default_fetch_size = 5000
    client_protocol_handler = _Handler
    cluster = _Cluster()

    def __init__(self, pool: _Pool) -> None:
        self._pools = {HOST: pool}


class _Policy:
    @staticmethod
    def make_query_plan(keyspace: str, statement: Any) -> list[str]:
        return [HOST]


def _requests(timeout_s: float = 5.0) -> tuple[DirectRequests, _Pool, list[Any]]:
    pool = _Pool(_Connection())
    unanswered: list[Any] = []
    direct = DirectRequests(
        _Session(pool),
        _Policy(),
        consistency=ConsistencyLevel.QUORUM,
        serial_consistency=ConsistencyLevel.SERIAL,
        timeout_s=timeout_s,
        speculate_after_s=timeout_s / 2,
        row_factory=dict_factory,
        unanswered=unanswered.append,
    )
    return direct, pool, unanswered


def _batch(idempotent: bool) -> BatchStatement:
    batch = BatchStatement()
    batch.is_idempotent = idempotent
    return batch


async def _answered(direct: DirectRequests, pool: _Pool, statement: Any, response: Any) -> Any:
    running = asyncio.ensure_future(direct.run(statement))
    await asyncio.sleep(0)
    pool.connection.answer(response)
    return await running


def _result(kind: int, names: list[str] | None = None, rows: list[tuple[Any, ...]] | None = None) -> ResultMessage:
    result = ResultMessage(kind)
    result.column_names, result.parsed_rows, result.paging_state = names, rows, None
    return result


async def test_rows_come_back_as_the_stores_rows_and_the_stream_is_returned() -> None:
    direct, pool, _ = _requests()
    answer = await _answered(direct, pool, _batch(True), _result(RESULT_KIND_ROWS, ["[applied]"], [(True,)]))
    assert answer.current_rows == [{"[applied]": True}]
    assert answer.column_names == ["[applied]"] and not answer.has_more_pages
    assert pool.returned == [False]
    sent = pool.connection.sent[0]
    assert sent.consistency_level == ConsistencyLevel.QUORUM and sent.timestamp == 1_700_000_000_000_000


async def test_a_write_answers_no_rows() -> None:
    direct, pool, _ = _requests()
    answer = await _answered(direct, pool, _batch(False), _result(RESULT_KIND_VOID))
    assert answer.current_rows == [] and answer.column_names is None


@pytest.mark.parametrize(
    "refusal",
    [
        UnavailableErrorMessage(0x1000, "unavailable", {"consistency": 4, "required_replicas": 2, "alive_replicas": 1}),
        OverloadedErrorMessage(0x1001, "overloaded", {}),
        PreparedQueryNotFound(0x2500, "unprepared", b"id"),
    ],
)
async def test_an_answer_of_a_statement_not_run_goes_to_the_drivers_path_even_for_a_conditional_write(
    refusal: Any,
) -> None:
    direct, pool, _ = _requests()
    with pytest.raises(Resend):
        await _answered(direct, pool, _batch(False), refusal)


async def test_a_timed_out_conditional_write_is_raised_as_the_driver_raises_it() -> None:
    direct, pool, _ = _requests()
    info = {"consistency": 4, "required_responses": 2, "received_responses": 1, "write_type": WriteType.CAS}
    with pytest.raises(WriteTimeout):
        await _answered(direct, pool, _batch(True), WriteTimeoutErrorMessage(0x1100, "timeout", info))


async def test_a_timeout_answer_goes_to_the_drivers_path_only_for_an_idempotent_statement() -> None:
    info = {"consistency": 4, "required_responses": 2, "received_responses": 1, "data_retrieved": False}
    direct, pool, _ = _requests()
    with pytest.raises(Resend):
        await _answered(direct, pool, _batch(True), ReadTimeoutErrorMessage(0x1200, "timeout", info))
    direct, pool, _ = _requests()
    with pytest.raises(Exception) as raised:
        await _answered(direct, pool, _batch(False), ReadTimeoutErrorMessage(0x1200, "timeout", info))
    assert not isinstance(raised.value, Resend)


async def test_an_invalid_request_is_raised_at_once_even_for_an_idempotent_statement() -> None:
    direct, pool, _ = _requests()
    with pytest.raises(InvalidRequest):
        await _answered(direct, pool, _batch(True), InvalidRequestException(0x2200, "bad TTL", {}))


async def test_a_lost_connection_is_raised_unless_the_statement_may_be_sent_again() -> None:
    direct, pool, _ = _requests()
    with pytest.raises(ConnectionShutdown):
        await _answered(direct, pool, _batch(False), ConnectionShutdown("gone"))
    direct, pool, _ = _requests()
    with pytest.raises(Resend):
        await _answered(direct, pool, _batch(True), ConnectionShutdown("gone"))


async def test_a_connection_failed_from_another_thread_answers_on_the_loop() -> None:
    direct, pool, _ = _requests()
    running = asyncio.ensure_future(direct.run(_batch(False)))
    await asyncio.sleep(0)
    other = threading.Thread(target=pool.connection.answer, args=(ConnectionShutdown("gone"),))
    other.start()
    other.join()
    with pytest.raises(ConnectionShutdown):
        await asyncio.wait_for(running, 5)


async def test_an_unanswered_conditional_write_times_out_with_its_host_and_its_stream_is_orphaned() -> None:
    direct, pool, unanswered = _requests(timeout_s=0.05)
    with pytest.raises(OperationTimedOut) as raised:
        await direct.run(_batch(False))
    assert raised.value.last_host == HOST
    assert pool.connection.orphaned_request_ids == {1} and pool.returned == [True]
    assert unanswered == []  # the store tells the coordinators of it (CassandraStore._unanswered)


async def test_an_unanswered_idempotent_statement_goes_to_the_drivers_path_at_the_speculative_delay() -> None:
    direct, pool, unanswered = _requests(timeout_s=0.1)
    started = asyncio.get_running_loop().time()
    with pytest.raises(Resend) as raised:
        await direct.run(_batch(True))
    assert asyncio.get_running_loop().time() - started < 0.09
    assert raised.value.spent_s == pytest.approx(0.05)  # the driver's path has what is left of the timeout
    assert unanswered == [HOST] and pool.connection.orphaned_request_ids == {1}
