"""What may be sent to Cassandra again after a timeout, and how an LWT whose outcome is unknown is recognised.

A node leaving or rejoining the cluster times out the statements it coordinates or answers (the nemesis soak:
QUORUM writes and LWTs at a node's shutdown and rejoin). A statement that reads, or writes the same values again,
is retried on the next host by the driver (`RetryIdempotent`). A conditional write (LWT) is not: it may have
applied, and sent again it answers "not applied" against its own write. Its outcome is settled by a SERIAL read of
its row (which also completes a Paxos round left half done) compared with what it writes (`LwtIntent.shows`):
applied if the row already holds its values, else it is sent again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cassandra import WriteType
from cassandra.policies import RetryPolicy
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

Row = dict[str, Any]

_NOT_IDEMPOTENT = re.compile(
    r"\bIF\b"  # a conditional write: settled by a SERIAL read instead (LwtIntent)
    r"|\b(now|uuid|currentTimestamp|currentTimeUUID)\s*\("  # a value made by the server at each execution
    r"|=\s*\w+\s*[+-]|=\s*\?\s*\+",  # counter increments, list appends and prepends
    re.IGNORECASE,
)


def is_idempotent(cql: str) -> bool:
    """Whether executing `cql` twice leaves what executing it once does: reads, and writes of given values."""
    return cql.lstrip()[:6].upper() == "SELECT" or not _NOT_IDEMPOTENT.search(cql)


# A coordinator that answers these did not run the statement (overloaded, shutting down, bootstrapping).
REFUSED_UNRUN = (OverloadedErrorMessage, IsBootstrappingErrorMessage)


class RetryIdempotent(RetryPolicy):  # type: ignore[misc]
    """The driver's retry decisions: a statement marked idempotent that timed out or met an error on a node is
    sent to the next node (up to `tries` times); others only when the coordinator refused before doing anything
    (Unavailable, overloaded or shutting down, bootstrapping). A conditional write that may have run is never
    retried here (its write type is CAS): see LwtIntent."""

    def __init__(self, tries: int = 2) -> None:
        self.tries = tries

    def _next_host(self, query: Any, consistency: Any, retry_num: int) -> tuple[int, Any]:
        if retry_num >= self.tries or not getattr(query, "is_idempotent", False):
            return self.RETHROW, None
        return self.RETRY_NEXT_HOST, consistency

    def on_read_timeout(self, query: Any, consistency: Any, *_: Any, retry_num: int, **__: Any) -> tuple[int, Any]:
        return self._next_host(query, consistency, retry_num)

    def on_write_timeout(
        self, query: Any, consistency: Any, write_type: int, *_: Any, retry_num: int, **__: Any
    ) -> tuple[int, Any]:
        if write_type == WriteType.CAS:
            return self.RETHROW, None
        return self._next_host(query, consistency, retry_num)

    def on_unavailable(self, query: Any, consistency: Any, *_: Any, retry_num: int, **__: Any) -> tuple[int, Any]:
        if retry_num >= self.tries:
            return self.RETHROW, None
        return self.RETRY_NEXT_HOST, consistency

    def on_request_error(self, query: Any, consistency: Any, error: Any, retry_num: int) -> tuple[int, Any]:
        if isinstance(error, REFUSED_UNRUN) and retry_num < self.tries:
            return self.RETRY_NEXT_HOST, consistency  # refused before it ran: safe for any statement, LWTs too
        return self._next_host(query, consistency, retry_num)


_WHERE = re.compile(r"\bWHERE\b(.*?)(?:\bLIMIT\b|\bALLOW\b|\bIF\b|$)", re.I | re.S)
_EQUALS_MARKER = re.compile(r"(\w+)\s*=\s*\?|\?")


def keyed_by(cql: str) -> tuple[tuple[str, int], ...]:
    """The columns a read names with `column = ?` in its WHERE clause, each with the index of its parameter: a row
    it answers that carries such a column must hold that value (a row of another key is not its answer)."""
    where = _WHERE.search(cql)
    if cql.lstrip()[:6].upper() != "SELECT" or where is None:
        return ()
    before = cql[: where.start(1)].count("?")
    found = []
    for index, marker in enumerate(_EQUALS_MARKER.finditer(where.group(1))):
        if marker.group(1) is not None:
            found.append((marker.group(1), before + index))
    return tuple(found)


_UPDATE = re.compile(
    r"^\s*UPDATE\s+(\w+)(\s+USING\s+TTL\s+(?:\?|\d+))?\s+SET\s+(.+?)\s+WHERE\s+(.+?)\s+IF\s+.+$", re.I | re.S
)
_INSERT = re.compile(
    r"^\s*INSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)\s*VALUES\s*\(([^)]*)\)\s*IF\s+NOT\s+EXISTS(\s+USING\s+TTL\s+\?)?\s*$",
    re.I | re.S,
)
_DELETE = re.compile(r"^\s*DELETE\s+FROM\s+(\w+)\s+WHERE\s+(.+?)\s+IF\s+.+$", re.I | re.S)
_ASSIGNMENT = re.compile(r"^\s*(\w+)\s*(\[\s*\?\s*\])?\s*=\s*(.+?)\s*$", re.S)
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class LwtIntent:
    """What a conditional write writes: the row it targets (`read` + `read_params`, a SELECT of it) and the values
    it sets there (column -> value, or (column, map key) -> value); `deletes`: it removes the row."""

    read: str
    read_params: tuple[Any, ...]
    writes: tuple[tuple[str | tuple[str, Any], Any], ...]
    deletes: bool = False

    def shows(self, row: Row | None) -> bool:
        """Whether `row` (read at SERIAL) already holds this write: then the write applied."""
        if self.deletes:
            return row is None
        if row is None:
            return False
        for target, value in self.writes:
            if isinstance(target, tuple):
                column, key = target
                found = (row.get(column) or {}).get(key)
            else:
                found = row.get(target, _ABSENT)
            if found is _ABSENT or not same_value(found, value):
                return False
        return True


def intent_of(cql: str, params: Sequence[Any], primary_key: Sequence[str]) -> LwtIntent | None:
    """The intent of the conditional write `cql` with `params` (its table's `primary_key` names the row of an
    INSERT), or None when it is of a form not understood here (then it is not retried)."""
    if match := _UPDATE.match(cql):
        table, ttl, assignments, where = match.groups()
        rest = list(params[1:] if ttl and "?" in ttl else params)
        writes = []
        for assignment in assignments.split(","):
            parts = _ASSIGNMENT.match(assignment)
            if parts is None:
                return None
            column, keyed, value = parts.groups()
            target: str | tuple[str, Any] = (column, rest.pop(0)) if keyed else column
            writes.append((target, rest.pop(0) if value == "?" else _literal(value)))
            if writes[-1][1] is _ABSENT:
                return None
        return LwtIntent(f"SELECT * FROM {table} WHERE {where}", tuple(rest[: where.count("?")]), tuple(writes))
    if match := _INSERT.match(cql):
        table, columns, values, _ = match.groups()
        names = [c.strip() for c in columns.split(",")]
        given = iter(params)
        sent = [next(given) if v.strip() == "?" else _literal(v) for v in values.split(",")]
        row = dict(zip(names, sent, strict=True))
        if _ABSENT in row.values() or not primary_key or any(k not in row for k in primary_key):
            return None
        where = " AND ".join(f"{k} = ?" for k in primary_key)
        return LwtIntent(f"SELECT * FROM {table} WHERE {where}", tuple(row[k] for k in primary_key), tuple(row.items()))
    if match := _DELETE.match(cql):
        table, where = match.groups()
        return LwtIntent(f"SELECT * FROM {table} WHERE {where}", tuple(params[: where.count("?")]), (), deletes=True)
    return None


def _literal(text: str) -> Any:
    text = text.strip()
    if text.lower() == "null":
        return None
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return _ABSENT


def same_value(stored: Any, sent: Any) -> bool:
    """Whether a value read back is the value written: timestamps to the millisecond in UTC (the driver answers
    naive UTC), collections by their items."""
    if isinstance(sent, datetime) and isinstance(stored, datetime):
        return _ms(stored) == _ms(sent)
    if isinstance(sent, (set, frozenset)) or isinstance(stored, (set, frozenset)):
        return set(stored or ()) == set(sent or ())
    if isinstance(sent, Mapping) or isinstance(stored, Mapping):
        return dict(stored or {}) == dict(sent or {})
    if isinstance(sent, (list, tuple)) and stored is not None:
        return list(stored) == list(sent)
    return bool(stored == sent)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(at: datetime) -> int:
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(milliseconds=1)
