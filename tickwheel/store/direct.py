"""Statements sent straight on the driver's connections: the driver's per-request machinery less what an answered
statement never uses.

`Session.execute_async` builds, per request, a ResponseFuture (a lock, an event with its condition, callback lists,
a query plan kept for retries, a speculative-execution plan, a timer through the connection class) and a ResultSet,
and answers through two callbacks: ~a fifth of the API's and the worker's event-loop time at 300 runs/s (py-spy,
BENCHMARKS.md "The driver's request path"). Here a statement goes out on the connection the driver's own pool lends
for the first host of the same load-balancing plan (token-aware, a node just back asked last), as the same EXECUTE or
BATCH message with the same client timestamp and consistency, and its answer comes back to the event loop through
one callback. Only the happy path is handled here: whatever the driver would do something about (an error it may
retry, a prepared statement the node lost, a connection gone, an idempotent statement unanswered at the
speculative-execution delay) is handed back to the caller as `Resend`, which sends the statement through the
driver's full path (its retry policy, its re-prepare, its speculative execution), exactly as if this attempt had not
been made, which is only done where making it again is safe: the node refused it before running it, or the
statement is idempotent. Anything else (a timeout or a lost connection under a conditional write, an error the
driver would not retry) is raised as the driver would raise it, and the store settles it as it always has.

Served only by connections on the event loop (`cassandra.driver_io = loop`): the answer's callback runs on the
loop's thread (a connection failed by another thread is handed over to it).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassandra import OperationTimedOut, WriteType
from cassandra.protocol import (
    RESULT_KIND_ROWS,
    RESULT_KIND_VOID,
    BatchMessage,
    ErrorMessage,
    ExecuteMessage,
    IsBootstrappingErrorMessage,
    OverloadedErrorMessage,
    PreparedQueryNotFound,
    ReadTimeoutErrorMessage,
    ResultMessage,
    ServerError,
    TruncateError,
    UnavailableErrorMessage,
    WriteTimeoutErrorMessage,
)
from cassandra.query import FETCH_SIZE_UNSET, BatchStatement, BoundStatement

Row = dict[str, Any]
RowFactory = Callable[[list[str], list[tuple[Any, ...]]], list[Row]]

# Answers that say the coordinator did not run the statement: the driver's path may send it again, anywhere.
_NOT_RUN = (UnavailableErrorMessage, OverloadedErrorMessage, IsBootstrappingErrorMessage, PreparedQueryNotFound)
# Answers the driver asks its retry policy about (the others, an invalid request among them, it raises at once):
# those that may have run are sent again only when the statement is idempotent (store.retries.RetryIdempotent).
_MAY_HAVE_RUN = (ReadTimeoutErrorMessage, WriteTimeoutErrorMessage, TruncateError, ServerError)
BORROW_TIMEOUT_S = 2.0  # the driver's own wait for a free stream on a connection (ResponseFuture._query)


class Resend(Exception):
    """Not answered here in a way the caller may use: send the statement through the driver's path, within what is
    left of the request timeout after `spent_s`."""

    def __init__(self, reason: str, spent_s: float = 0.0):
        super().__init__(reason)
        self.spent_s = spent_s


@dataclass(frozen=True, slots=True)
class Answer:
    """A statement's answer: its rows (a write's: none) and the paging state of its next page."""

    column_names: list[str] | None
    current_rows: list[Row]
    paging_state: bytes | None

    @property
    def has_more_pages(self) -> bool:
        """Whether a next page exists (`paging_state` asks for it)."""
        return self.paging_state is not None


_VOID = Answer(None, [], None)


class DirectRequests:
    """Sends bound statements and batches on the driver's pooled connections (see the module's docstring)."""

    def __init__(
        self,
        session: Any,
        policy: Any,
        *,
        consistency: int,
        serial_consistency: int,
        timeout_s: float,
        speculate_after_s: float,
        row_factory: RowFactory,
        unanswered: Callable[[Any], None],
    ):
        self._session = session
        self._policy = policy
        self._consistency = consistency
        self._serial_consistency = serial_consistency
        self._timeout_s = timeout_s
        self._speculate_after_s = speculate_after_s
        self._row_factory = row_factory
        self._unanswered = unanswered  # told of a host that let an idempotent statement reach its speculative delay
        self._handler = session.client_protocol_handler
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    async def run(self, statement: BoundStatement | BatchStatement, paging_state: bytes | None = None) -> Answer:
        """`statement`'s answer; `Resend` when the driver's path should send it (see the module's docstring)."""
        message, metadata, prepared = self._message(statement, paging_state)
        session = self._session
        for host in self._policy.make_query_plan(session.keyspace, statement):
            pool = session._pools.get(host)
            if pool is None or pool.is_shutdown:
                continue
            try:
                connection, request_id = pool.borrow_connection(
                    timeout=BORROW_TIMEOUT_S,
                    routing_key=statement.routing_key,
                    keyspace=statement.keyspace,
                    table=getattr(statement, "table", None),
                )
            except Exception:  # no connection or stream free on this host: the next one, as the driver does
                continue
            answer: asyncio.Future[Answer] = self._loop.create_future()
            request = _Request(self, answer, host, pool, connection, request_id, prepared, statement.is_idempotent)
            try:
                connection.send_msg(
                    message,
                    request_id,
                    cb=request.answered,
                    encoder=self._handler.encode_message,
                    decoder=self._handler.decode_message,
                    result_metadata=metadata,
                )
            except Exception:  # refused before it was written (closed, defunct, busy): the next host
                connection._requests.pop(request_id, None)
                pool.return_connection(connection)
                continue
            return await request.wait()
        raise Resend("no host took the statement")

    def _message(
        self, statement: BoundStatement | BatchStatement, paging_state: bytes | None
    ) -> tuple[ExecuteMessage | BatchMessage, Any, Any]:
        """The driver's message for `statement` (Session._create_response_future), its result metadata and its
        prepared statement."""
        session = self._session
        consistency = statement.consistency_level
        if consistency is None:
            consistency = self._consistency
        serial = statement.serial_consistency_level
        if serial is None:
            serial = self._serial_consistency
        timestamp = session.cluster.timestamp_generator() if session.use_client_timestamp else None
        if isinstance(statement, BatchStatement):
            message = BatchMessage(
                statement.batch_type, statement._statements_and_parameters, consistency, serial, timestamp,
                statement.keyspace,
            )  # fmt: skip
            return message, None, None
        prepared = statement.prepared_statement
        metadata, metadata_id = prepared.result_metadata_and_id
        fetch_size = statement.fetch_size
        if fetch_size is FETCH_SIZE_UNSET:
            fetch_size = session.default_fetch_size
        execute = ExecuteMessage(
            prepared.query_id,
            statement.values,
            consistency,
            serial,
            fetch_size,
            paging_state,
            timestamp,
            skip_meta=bool(metadata) and metadata_id is not None,
            result_metadata_id=metadata_id,
        )
        return execute, metadata, prepared


class _Request:
    """One statement in flight on one connection: its answer, its timer."""

    __slots__ = ("_answer", "_connection", "_host", "_idempotent", "_owner", "_pool", "_prepared", "_request_id",
                 "_timer")  # fmt: skip

    def __init__(
        self,
        owner: DirectRequests,
        answer: asyncio.Future[Answer],
        host: Any,
        pool: Any,
        connection: Any,
        request_id: int,
        prepared: Any,
        idempotent: bool,
    ):
        self._owner = owner
        self._answer = answer
        self._host = host
        self._pool = pool
        self._connection = connection
        self._request_id = request_id
        self._prepared = prepared
        self._idempotent = idempotent
        self._timer: asyncio.TimerHandle | None = None

    async def wait(self) -> Answer:
        owner = self._owner
        # An idempotent statement unanswered at the speculative delay is the driver's to send again (elsewhere
        # first: the host is asked last for a while); another waits for the whole request timeout.
        delay = owner._speculate_after_s if self._idempotent else owner._timeout_s
        self._timer = owner._loop.call_later(delay, self._expired)
        try:
            return await self._answer
        finally:
            self._timer.cancel()

    def answered(self, response: Any) -> None:
        """The connection's callback: the decoded answer, or the error that failed the connection."""
        owner = self._owner
        if threading.get_ident() != owner._loop_thread:  # a connection failed from another thread
            owner._loop.call_soon_threadsafe(self.answered, response)
            return
        pool = self._pool
        if not pool.is_shutdown:
            pool.return_connection(self._connection)
        answer = self._answer
        if answer.done():
            return
        if isinstance(response, ResultMessage):
            kind = response.kind
            if kind == RESULT_KIND_ROWS:
                self._keep_metadata(response)
                names = response.column_names
                rows = owner._row_factory(names, response.parsed_rows)
                answer.set_result(Answer(names, rows, response.paging_state))
            elif kind == RESULT_KIND_VOID:
                answer.set_result(_VOID)
            else:  # a keyspace set or a schema changed: never asked of this path
                answer.set_exception(Resend(f"an answer of kind {kind}"))
        elif isinstance(response, ErrorMessage):
            resend = self._resendable(response)
            answer.set_exception(Resend(response.summary_msg()) if resend else response.to_exception())
        elif isinstance(response, BaseException):  # the connection failed: it may or may not have run
            answer.set_exception(Resend(str(response)) if self._idempotent else response)
        else:
            answer.set_exception(Resend(f"an answer of type {type(response).__name__}"))

    def _resendable(self, error: ErrorMessage) -> bool:
        """The driver's retry policy would send it again (store.retries.RetryIdempotent), or re-prepare it."""
        if isinstance(error, _NOT_RUN):
            return True
        if not isinstance(error, _MAY_HAVE_RUN):
            return False
        if isinstance(error, WriteTimeoutErrorMessage) and error.info.get("write_type") == WriteType.CAS:
            return False
        return self._idempotent

    def _keep_metadata(self, response: ResultMessage) -> None:
        """A statement's result metadata that changed (a column added), kept as the driver keeps it."""
        new_id = getattr(response, "result_metadata_id", None)
        if self._prepared is not None and new_id is not None and response.column_metadata:
            self._prepared.update_result_metadata(response.column_metadata, new_id)

    def _expired(self) -> None:
        """No answer in time: the stream is orphaned as the driver orphans it (a late answer must not be taken for
        another request's), the host asked last for a while; an idempotent statement goes to the driver's path."""
        answer, owner = self._answer, self._owner
        if answer.done():
            return
        connection, request_id = self._connection, self._request_id
        if connection._requests.pop(request_id, None) is not None and not self._pool.is_shutdown:
            with connection.lock:
                connection.orphaned_request_ids.add(request_id)
                if len(connection.orphaned_request_ids) >= connection.orphaned_threshold:
                    connection.orphaned_threshold_reached = True
            self._pool.return_connection(connection, stream_was_orphaned=True)
        if self._idempotent:
            owner._unanswered(self._host)
            answer.set_exception(Resend("unanswered at the speculative delay", owner._speculate_after_s))
        else:
            errors = {str(getattr(self._host, "endpoint", self._host)): "Client request timeout"}
            answer.set_exception(OperationTimedOut(errors, self._host))
