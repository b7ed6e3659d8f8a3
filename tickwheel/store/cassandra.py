"""The CQL adapter: one driver session, prepared statements, QUORUM by default, driver futures -> asyncio.

This is the only place the Cassandra/Scylla driver is touched. Driver errors that mean "the cluster did not
answer" become `Unavailable` (retriable, HTTP 503); everything above works with plain rows.

A node leaving or rejoining must not fail what the cluster can still do (store.retries): a statement that is
safe to send again is marked idempotent and retried by the driver on the next node (and sent to a second node
when the first has not answered in half the request timeout); a conditional write whose outcome is unknown is
settled by a SERIAL read of its row before it is sent again (`applied`); a node just back up, or that let a
request run into the timeout, is the last one asked to coordinate for `warm_up_s` (store.coordinators). Rows that
are not of the statement's shape (seen under overload: rows of another statement, without the columns asked for,
which became 500s, a 401 for a valid key and a 422 for a replayed create) are refused as `Unavailable`, never
handed up.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import re
import socket
import threading
import weakref
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from cassandra import ConsistencyLevel, InvalidRequest, OperationTimedOut, RequestExecutionException
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    ResponseFuture,
    Session,
)
from cassandra.connection import ConnectionException
from cassandra.policies import (
    ConstantSpeculativeExecutionPolicy,
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    TokenAwarePolicy,
)
from cassandra.protocol import RequestExecutionException as ServerRefusal
from cassandra.protocol import ServerError
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement, SimpleStatement, dict_factory

from tickwheel import metrics
from tickwheel.errors import BatchTooLarge, SettingsError, Unavailable
from tickwheel.settings import CassandraSettings, host_port
from tickwheel.store.binding import Binding
from tickwheel.store.coordinators import WarmUpPolicy
from tickwheel.store.direct import DirectRequests, Resend
from tickwheel.store.grouping import GroupedBatches
from tickwheel.store.loop_io import loop_connection_class
from tickwheel.store.retries import LwtIntent, RetryIdempotent, intent_of, is_idempotent, keyed_by, same_value
from tickwheel.store.rounds import RoundBatches, RoundReads

log = logging.getLogger(__name__)

SERVER_VERSION = "SELECT release_version FROM system.local"
"""The read every live node answers: readiness probes here and in the local stack."""
NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
"""Socket options of every driver connection: requests leave as soon as they are written (no Nagle)."""

Row = dict[str, Any]
_CONDITION = re.compile(r"\bIF\b", re.IGNORECASE)
_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
# The server's own refusals (a coordinator overloaded or shutting down, bootstrapping) reach here as protocol
# errors, not as the driver's exceptions: a node's shutdown answered "Server is shutting down" and those went
# up raw (the soak's run 5: claims dropped as "run message failed").
_UNAVAILABLE = (
    NoHostAvailable,
    OperationTimedOut,
    RequestExecutionException,
    ServerRefusal,
    ServerError,
    ConnectionError,
    OSError,
    # The driver's own connection errors are neither: a node that stops with a statement in flight answers
    # ConnectionShutdown (run 11 of the soak: a keyed create's LWT went up raw as a 500).
    ConnectionException,
)
SPECULATE_AFTER = 0.5  # an idempotent statement unanswered for this share of the request timeout goes to a 2nd node
LWT_TRIES = 3  # sends of a conditional write whose outcome stays unknown, each after a SERIAL read settled it


class CassandraStore:
    """An open session on one keyspace; `execute`, `page` and `batch` are awaitable."""

    def __init__(
        self,
        settings: CassandraSettings,
        cluster: Cluster,
        session: Session,
        coordinators: WarmUpPolicy | None = None,
        direct: DirectRequests | None = None,
    ):
        self.settings = settings
        self.keyspace = settings.keyspace
        self._cluster = cluster
        self._session = session
        self._prepared: dict[str, Binding] = {}  # each prepared statement with its binding (store.binding)
        self._preparing: dict[str, asyncio.Future[PreparedStatement]] = {}
        # the columns each prepared read answers, as prepared (what its rows are checked against)
        self._columns: dict[str, frozenset[str]] = {}
        self._keys: dict[str, tuple[tuple[str, int], ...]] = {}  # a read's `column = ?` and their parameters
        self._intents: dict[str, bool] = {}  # conditional writes whose form store.retries does not understand
        self._grouped = GroupedBatches(
            lambda rows, logged: self.batch(rows, logged=logged), at_once_below=settings.group_commit_below
        )
        self._rounds = RoundBatches(lambda rows: self.batch(rows, logged=False))
        self._round_reads: dict[str, RoundReads[Any, Row]] = {}  # by the grouped read's statement
        self._coordinators = coordinators  # told of the hosts that leave a request unanswered
        self._direct = direct  # statements sent on the driver's connections without its per-request machinery

    @classmethod
    async def connect(
        cls, settings: CassandraSettings, *, keyspace: bool = True, driver_options: dict[str, str] | None = None
    ) -> CassandraStore:
        """Connect (in a thread: the driver's connect blocks) and, if `keyspace`, use the configured one.
        `driver_options` (benchmarks/cql_cost.py) overrides `protocol_version` (5), `compression` (false) and
        `token_aware` (true) to compare them."""
        hosts = [host_port(h, 9042) for h in settings.hosts]
        options = driver_options or {}
        policy = DCAwareRoundRobinPolicy(local_dc=settings.local_dc)
        # a node just back (or silent) is asked last: it timed out what it coordinated (store.coordinators)
        coordinators = WarmUpPolicy(
            policy if options.get("token_aware") == "false" else TokenAwarePolicy(policy), settings.warm_up_s
        )
        profile = ExecutionProfile(
            load_balancing_policy=coordinators,
            consistency_level=ConsistencyLevel.name_to_value[settings.consistency],
            serial_consistency_level=ConsistencyLevel.SERIAL,
            request_timeout=settings.request_timeout_s,
            row_factory=dict_factory,
            retry_policy=RetryIdempotent(),
            speculative_execution_policy=ConstantSpeculativeExecutionPolicy(
                settings.request_timeout_s * SPECULATE_AFTER, 1
            ),
        )
        if settings.driver_io not in ("libev", "loop"):
            raise SettingsError(f"TICKWHEEL_CASSANDRA_DRIVER_IO={settings.driver_io!r}: libev or loop")
        on_loop = settings.driver_io == "loop"
        io = {"connection_class": loop_connection_class(asyncio.get_running_loop())} if on_loop else {}
        cluster = Cluster(
            **io,
            contact_points=[h for h, _ in hosts],
            port=hosts[0][1],
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connect_timeout=settings.connect_timeout_s,
            # The driver leaves Nagle's algorithm on: a request written while an earlier one is unacknowledged waited
            # for the node's delayed ACK, 40 ms, which capped one API process at ~400 creates/s with its CPU idle
            # (BENCHMARKS.md, "Nagle's algorithm on the driver's sockets").
            sockopts=NO_DELAY,
            protocol_version=int(options.get("protocol_version", 5)),
            # CQL frames are small (a run's rows are ~3 KB in all): compressing each one cost the driver 4-14 % of
            # its CPU per run and Cassandra nothing measurable either way (BENCHMARKS.md, "Cost per run, round 3").
            compression=options.get("compression") == "true",
            reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=settings.reconnect_max_s),
        )
        try:
            session = await asyncio.to_thread(cluster.connect, settings.keyspace if keyspace else None)
        except _UNAVAILABLE as exc:
            cluster.shutdown()
            raise Unavailable(f"Cassandra at {','.join(settings.hosts)} is unavailable: {exc}") from exc
        direct = None
        if on_loop:
            direct = DirectRequests(
                session,
                coordinators,
                consistency=profile.consistency_level,
                serial_consistency=profile.serial_consistency_level,
                timeout_s=settings.request_timeout_s,
                speculate_after_s=settings.request_timeout_s * SPECULATE_AFTER,
                row_factory=dict_factory,
                unanswered=coordinators.unanswered,
            )
        return cls(settings, cluster, session, coordinators, direct)

    async def close(self) -> None:
        """Shut the driver's connections down (in a thread: the driver's shutdown blocks)."""
        await asyncio.to_thread(self._cluster.shutdown)

    async def prepare(self, cql: str) -> PreparedStatement:
        """Prepare once per session; later calls return the cached statement. The driver's prepare blocks, so the
        first one runs in a thread (never on the event loop), shared by every caller that asks meanwhile."""
        known = self._prepared.get(cql)
        if known is not None:
            return known.prepared
        pending = self._preparing.get(cql)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(self._call, self._session.prepare, cql))
            self._preparing[cql] = pending
        try:
            made = await asyncio.shield(pending)  # a cluster out of reach is Unavailable, not a 500
        finally:
            if pending.done():
                self._preparing.pop(cql, None)
        if cql not in self._prepared:
            made.is_idempotent = is_idempotent(cql)
            # result metadata: (keyspace, table, column name, type) per column answered
            self._columns[cql] = frozenset(column[2] for column in made.result_metadata or ())
            self._prepared[cql] = Binding(made)
        return made

    async def bound(self, cql: str, params: Sequence[Any]) -> BoundStatement:
        """The prepared statement `cql` bound to `params` (store.binding: the driver's bytes at a third of its
        cost)."""
        binding = self._prepared.get(cql)
        if binding is None:
            await self.prepare(cql)
            binding = self._prepared[cql]
        return binding.bind(params)

    async def prepare_all(self, statements: Iterable[str]) -> int:
        """Prepare `statements` now, all at once (a process's start-up), so that no run waits for the first
        prepare of its statement; returns how many were prepared. One that fails is logged and prepared again on
        its first use."""
        cqls = list(statements)
        results = await asyncio.gather(*(self.prepare(cql) for cql in cqls), return_exceptions=True)
        for cql, result in zip(cqls, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("could not prepare at start-up (prepared on first use instead): %s: %s", cql, result)
        return sum(1 for result in results if not isinstance(result, BaseException))

    async def execute(self, cql: str, params: Sequence[Any] = (), *, prepared: bool = True) -> list[Row]:
        """Run one statement and return all rows of its first page (use `page` for paged reads)."""
        rows, _ = await self.page(cql, params, page_size=None, prepared=prepared)
        return rows

    async def page(
        self,
        cql: str,
        params: Sequence[Any] = (),
        *,
        page_size: int | None = 100,
        cursor: str | None = None,
        prepared: bool = True,
    ) -> tuple[list[Row], str | None]:
        """One page of rows and an opaque cursor for the next page (None on the last page)."""
        statement: Any
        sent: Sequence[Any]
        if prepared:
            statement, sent = await self.bound(cql, params), ()
        else:
            statement, sent = SimpleStatement(cql), params
        if page_size is not None:
            statement.fetch_size = page_size
        paging_state = _decode_cursor(cursor)
        _counter_of(cql).inc()
        if prepared:
            result = await self._run(statement, paging_state)
        else:
            future = self._call(self._session.execute_async, statement, sent or None, paging_state=paging_state)
            result = await self._answer(future)
        self._check_shape(cql, result.column_names)
        rows = list(result.current_rows)
        self._check_keys(cql, params, rows)
        next_state = result.paging_state if result.has_more_pages else None
        return rows, _encode_cursor(next_state)

    async def applied(self, cql: str, params: Sequence[Any] = ()) -> tuple[bool, Row]:
        """Run a conditional (LWT) statement; returns whether it applied and the row Cassandra returned.

        A send that failed (a timeout, a node gone: it may have applied) is settled before it is sent again: a
        SERIAL read of its row (which completes a Paxos round left half done) that already shows the write means
        it applied (that row is returned); otherwise it is sent again, up to LWT_TRIES sends in all."""
        for sends in range(1, LWT_TRIES + 1):
            try:
                rows = await self.execute(cql, params)
                break
            except Unavailable as exc:
                intent = self._intent(cql, params)
                if intent is None or sends == LWT_TRIES:
                    raise
                state = await self._read_serial(intent)
                metrics.lwt_settled.labels("applied" if intent.shows(state) else "sent_again").inc()
                # what failed (a coordinator's timeout, a node gone): its cause, for a stall to be traced
                cause = f"{exc}: {exc.__cause__!r}" if exc.__cause__ is not None else str(exc)
                if intent.shows(state):
                    log.warning("a conditional write that failed (%s) had applied (its row shows it): %s", cause, cql)
                    return True, state or {}
                log.info("a conditional write that failed (%s) had not applied; sent again: %s", cause, cql)
        row = rows[0] if rows else {"[applied]": False}
        return bool(row.get("[applied]")), row

    def _intent(self, cql: str, params: Sequence[Any]) -> LwtIntent | None:
        table = re.search(r"\b(?:UPDATE|INTO|FROM)\s+(\w+)", cql, re.IGNORECASE)
        meta = self._cluster.metadata.keyspaces.get(self.keyspace)
        columns = meta.tables.get(table.group(1)) if meta is not None and table is not None else None
        primary_key = [c.name for c in columns.primary_key] if columns is not None else []
        intent = intent_of(cql, params, primary_key)
        if intent is None and not self._intents.get(cql):
            self._intents[cql] = True
            log.error("a conditional write store.retries cannot settle is not sent again: %s", cql)
        return intent

    async def _read_serial(self, intent: LwtIntent) -> Row | None:
        """The row `intent` writes, read at SERIAL (a Paxos read: it sees every applied conditional write)."""
        bound = await self.bound(intent.read, intent.read_params)
        bound.consistency_level = ConsistencyLevel.SERIAL
        metrics.cql_statements.labels("read").inc()
        result = await self._run(bound)
        self._check_shape(intent.read, result.column_names)
        rows = list(result.current_rows)
        return rows[0] if rows else None

    def _check_keys(self, cql: str, params: Sequence[Any], rows: list[Row]) -> None:
        """Refuse rows of another key: a read's rows that carry a column its WHERE clause fixes (`column = ?`)
        must hold the value asked for (a crossed answer of the same shape, which `_check_shape` cannot tell). A
        crossed answer is another request's whole answer, so its first and last rows tell (no per-row cost on a
        preload of thousands)."""
        if not rows:
            return
        keys = self._keys.get(cql)
        if keys is None:
            keys = self._keys[cql] = keyed_by(cql)
        for column, index in keys:
            if index >= len(params):
                continue
            asked = params[index]
            for row in (rows[0], rows[-1]):
                found = row.get(column, asked)
                comparable = isinstance(found, type(asked)) or isinstance(asked, type(found))  # a value as stored
                if found != asked and comparable and not same_value(found, asked):
                    metrics.backend_errors.labels("cassandra").inc()
                    log.error("Cassandra answered a row of %s %s for %s = %s: %s; not used", column, found, column,
                              asked, cql)  # fmt: skip
                    raise Unavailable("Cassandra answered rows of another key; try again")

    def _check_shape(self, cql: str, columns: Sequence[str] | None) -> None:
        """Refuse rows that are not of the statement's shape: a read's must carry every column it was prepared
        with (more is a column added since), a conditional write's its `[applied]`."""
        expected = self._columns.get(cql)
        if expected:
            missing = set(expected) - set(columns or ())
        elif statement_kind(cql) == "lwt":
            missing = {"[applied]"} - set(columns or ())
        else:
            return
        if missing:
            metrics.backend_errors.labels("cassandra").inc()
            log.error("Cassandra answered rows without %s for %s (columns %s); not used", sorted(missing), cql, columns)
            raise Unavailable("Cassandra answered rows of another shape; try again")

    async def batch(self, statements: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True) -> None:
        """Write several rows as one (logged: all or nothing) batch."""
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        idempotent = True
        for cql, params in statements:
            bound = await self.bound(cql, params)
            batch.add(bound)
            idempotent = idempotent and bound.is_idempotent  # judged once, when prepared (2 % of a worker's CPU)
        batch.is_idempotent = idempotent
        _counter("batch_logged" if logged else "batch_unlogged").inc()
        try:
            await self._run(batch)
        except InvalidRequest as exc:
            if "Batch too large" not in str(exc):
                raise
            # Refused whole for its size (the nodes' batch_size_fail_threshold): what the caller may tell apart
            # from a failure (a 413, or the rows written one by one where no atomicity is needed).
            raise BatchTooLarge(f"Cassandra refused a batch of {len(statements)} statements as too large") from exc

    async def grouped_batch(self, statements: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True) -> None:
        """`batch`, sent at once while few are in flight, else together with the other creates' batches queued
        behind them (store.grouping: one request for many creates); logged, the rows are still all or none."""
        await self._grouped.write(statements, logged=logged)

    async def round_batch(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """An unlogged `batch`, written together with the other unlogged batches asked for in this event-loop round
        (store.rounds: one request for the rows of the runs handled together)."""
        await self._rounds.write(statements)

    async def read_in_round(self, one: str, many: str, column: str, key: Any) -> Row | None:
        """The row `one` (a read by `column = ?`) answers for `key` (None: no row), read together with the other
        keys asked for in this event-loop round by `many` (the same read by `column IN ?`, answering `column`)
        when there are several (store.rounds)."""
        reads = self._round_reads.get(many)
        if reads is None:

            async def single(value: Any) -> Row | None:
                rows = await self.execute(one, [value])
                return rows[0] if rows else None

            async def several(values: Sequence[Any]) -> dict[Any, Row]:
                return self._by_key(many, column, values, await self.execute(many, [list(values)]))

            reads = self._round_reads[many] = RoundReads(single, several)
        return await reads.get(key)

    def _by_key(self, cql: str, column: str, asked: Sequence[Any], rows: list[Row]) -> dict[Any, Row]:
        """The rows of a `column IN ?` read by their key, each of which must be one asked for (a crossed answer of
        the same shape is another request's: `_check_keys` sees `column = ?` keys only)."""
        found = {row[column]: row for row in rows}
        if not found.keys() <= set(asked):
            metrics.backend_errors.labels("cassandra").inc()
            log.error("Cassandra answered rows of %s not asked for: %s", column, cql)
            raise Unavailable("Cassandra answered rows of another key; try again")
        return found

    async def ping(self) -> None:
        """One cheap read that any live node answers (readiness probes)."""
        await self.execute(SERVER_VERSION)

    async def execute_raw(self, cql: str) -> None:
        """Run unprepared DDL (migrations)."""
        future = self._call(self._session.execute_async, cql, timeout=60.0)
        await _await(future, self.settings.hosts)

    async def _run(self, statement: BoundStatement | BatchStatement, paging_state: bytes | None = None) -> Any:
        """`statement`'s answer (rows, column names, paging state): sent directly on a driver connection when the
        connections are the loop's (store.direct), through the driver's full path when that hands it back."""
        timeout = self.settings.request_timeout_s
        if self._direct is not None:
            try:
                return await self._direct.run(statement, paging_state)
            except Resend as resend:
                timeout -= resend.spent_s
            except _UNAVAILABLE as exc:
                unavailable = _did_not_answer(exc, self.settings.hosts)
                self._unanswered(unavailable)
                raise unavailable from exc
        future = self._call(self._session.execute_async, statement, paging_state=paging_state, timeout=timeout)
        return await self._answer(future)

    async def _answer(self, future: ResponseFuture) -> Any:
        """`future`'s result; a host that let it run into the request timeout is asked last for a while (an LWT's
        SERIAL read and its next send among them: `applied`)."""
        try:
            return await _await(future, self.settings.hosts)
        except Unavailable as exc:
            self._unanswered(exc)
            raise

    def _unanswered(self, exc: Unavailable) -> None:
        """A coordinator that let the request run into the timeout (`exc`'s cause) is asked last for a while."""
        if isinstance(exc.__cause__, OperationTimedOut) and self._coordinators is not None:
            self._coordinators.unanswered(exc.__cause__.last_host)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> ResponseFuture:
        try:
            return fn(*args, **kwargs)
        except _UNAVAILABLE as exc:
            raise Unavailable(f"Cassandra is unavailable: {exc}") from exc


def statements_of(*modules: ModuleType) -> list[str]:
    """The CQL statements `modules` keep as constants (upper-case names): what a process prepares at start-up."""
    found = {
        value
        for module in modules
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and _STATEMENT.match(value) and "{" not in value
    }
    return sorted(found)


@functools.lru_cache(maxsize=8)
def _counter(kind: str) -> Any:
    """The `cql_statements` child of `kind`, looked up once (a label lookup per request was ~1-2 % of a worker's
    samples)."""
    return metrics.cql_statements.labels(kind)


@functools.lru_cache(maxsize=4096)
def _counter_of(cql: str) -> Any:
    """The `cql_statements` child of the statement's kind, the kind's regular expression run once per text."""
    return _counter(statement_kind(cql))


@functools.lru_cache(maxsize=4096)
def statement_kind(cql: str) -> str:
    """`read`, `lwt` (a conditional write: Paxos rounds) or `write`, the label of `cql_statements`."""
    if cql.lstrip()[:6].upper() == "SELECT":
        return "read"
    return "lwt" if _CONDITION.search(cql) else "write"


async def _await(future: ResponseFuture, hosts: Sequence[str]) -> Any:
    """Bridge a driver ResponseFuture (completed on the driver's thread) to the running event loop."""
    loop = asyncio.get_running_loop()
    here = threading.get_ident()
    done: asyncio.Future[Any] = loop.create_future()
    # The future keeps its callbacks, so they hold both futures weakly (the awaiting frame holds them strongly):
    # a strong reference would close a cycle (future -> callback -> done -> its ResultSet -> future).
    refs = (weakref.ref(done), weakref.ref(future))

    def hand_over(exc: BaseException | None) -> None:
        # On the loop's own thread (connections served by the loop: store.loop_io) the answer is handed over at once.
        if threading.get_ident() == here:
            _resolve(*refs, exc)
        else:
            loop.call_soon_threadsafe(_resolve, *refs, exc)

    future.add_callbacks(lambda _: hand_over(None), hand_over)
    try:
        return await done
    except _UNAVAILABLE as exc:
        raise _did_not_answer(exc, hosts) from exc


def _did_not_answer(exc: BaseException, hosts: Sequence[str]) -> Unavailable:
    """The `Unavailable` a driver error that means "the cluster did not answer" becomes (its cause: `exc`)."""
    unavailable = Unavailable(f"Cassandra at {','.join(hosts)} did not answer: {exc}")
    unavailable.__cause__ = exc
    return unavailable


def _resolve(
    awaited: weakref.ref[asyncio.Future[Any]], sent: weakref.ref[ResponseFuture], exc: BaseException | None
) -> None:
    done, future = awaited(), sent()
    if future is not None:
        _untie(future)
    if done is None or future is None or done.done():  # None: the awaiting task was cancelled and let go
        return
    if exc is not None:
        done.set_exception(exc)
        return
    # The driver exposes the first page through `result()`; it is ready, so this does not block.
    done.set_result(future.result())


def _untie(future: ResponseFuture) -> None:
    """Drop a finished request's timer, which the driver cancels but keeps: the timer's callback is a method of
    the future, a reference cycle that held each request's ~34 objects (the message, the statement, the event,
    the query plan, the rows) until the cyclic collector's next pass, the largest part of a worker's collection
    time (tickwheel/heap.py). Once its final result or error is set (before the callbacks run), the driver
    reads the timer only to cancel it again."""
    future._timer = None


def _encode_cursor(paging_state: bytes | None) -> str | None:
    return base64.urlsafe_b64encode(paging_state).decode() if paging_state else None


def _decode_cursor(cursor: str | None) -> bytes | None:
    if not cursor:
        return None
    try:
        return base64.urlsafe_b64decode(cursor.encode())
    except ValueError as exc:
        from tickwheel.errors import InvalidInput

        raise InvalidInput("cursor is not one this API returned", field="cursor") from exc
