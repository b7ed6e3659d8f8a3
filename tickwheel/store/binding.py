"""Values bound to a prepared statement as the driver binds them, at about a third of its cost.

The driver's `BoundStatement.bind` makes a `ColDesc` tuple and asks the column encryption policy for every value,
and its timestamp serializer goes through `datetime.utctimetuple` and `calendar.timegm` (~1.4 us a value, most of
a row's serializing: a create binds ~12 timestamps). Binding was a tenth of the API's event-loop samples on single
creates and a quarter on batches (issue 14, session 17). A `Binding` chooses each bind marker's serializer once, at
prepare, and the same bytes come out: a timestamp is `int64(ms since the epoch)` (whole seconds * 1000 +
microseconds // 1000, as the driver computes it), every other type is the driver's own `serialize`. What it does
not handle in the same way is handed to the driver's `bind`: a statement with column encryption, a parameter count
other than the markers' (the driver pads with UNSET_VALUE and checks the routing key), an UNSET_VALUE (refused in
the routing key), and a value a serializer refuses (so the error is the driver's, naming the column).
`tests/integration/test_store_binding.py` compares the bytes with the driver's for every statement the store keeps.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from cassandra.cqltypes import DateType
from cassandra.query import UNSET_VALUE, BoundStatement, PreparedStatement

Serializer = Callable[[Any, int], bytes]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_INT64 = struct.Struct(">q")


def serialize_timestamp(value: Any, protocol_version: int) -> bytes:
    """`DateType.serialize` for a datetime (naive ones are UTC, as the driver reads them) without its time tuple;
    anything else (a date, a number) goes to the driver's."""
    if type(value) is not datetime:
        return bytes(DateType.serialize(value, protocol_version))
    delta = value - (_EPOCH if value.tzinfo is not None else _EPOCH_NAIVE)
    return _INT64.pack((delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000)


def serializer_of(cql_type: Any) -> Serializer:
    """The serializer of one bind marker's type."""
    if cql_type.serialize is DateType.serialize:  # `timestamp` (DateType, and TimestampType which inherits it)
        return serialize_timestamp
    return cql_type.serialize  # type: ignore[no-any-return]


class Binding:
    """How one prepared statement's values become bytes: a serializer per bind marker, chosen once."""

    __slots__ = ("_protocol", "_serializers", "prepared")

    def __init__(self, prepared: PreparedStatement):
        self.prepared = prepared
        columns = prepared.column_metadata or ()
        self._protocol = prepared.protocol_version
        # with column encryption the driver's bind encrypts: left to it
        self._serializers: tuple[Serializer, ...] | None = (
            None if prepared.column_encryption_policy else tuple(serializer_of(c.type) for c in columns)
        )

    def bind(self, params: Sequence[Any]) -> BoundStatement:
        """The statement bound to `params`, as `prepared.bind(params)` would bind it."""
        bound = BoundStatement(self.prepared)
        serializers = self._serializers
        if serializers is None or len(params) != len(serializers):
            return bound.bind(params)
        protocol = self._protocol
        values: list[Any] = []
        try:
            for serialize, value in zip(serializers, params, strict=True):
                if value is None:
                    values.append(None)
                elif value is UNSET_VALUE:  # the driver's rules for it (never in the routing key)
                    return bound.bind(params)
                else:
                    values.append(serialize(value, protocol))
        except (TypeError, struct.error):
            return bound.bind(params)  # the driver's error, naming the column
        bound.raw_values = params
        bound.values = values
        return bound
