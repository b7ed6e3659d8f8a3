"""store.binding on the statements the processes prepare: the same bytes and routing key as the driver's bind."""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from datetime import UTC, datetime
from typing import Any

import tickwheel.store
from tickwheel.settings import Settings
from tickwheel.store.binding import Binding, serialize_timestamp, serializer_of
from tickwheel.store.cassandra import CassandraStore, statements_of


def _sample(cql_type: str, i: int) -> Any:
    """A value of a CQL type (as the driver names it), different for each marker."""
    scalars: dict[str, Any] = {
        "uuid": uuid.uuid4(),
        "timeuuid": uuid.uuid1(),
        "varchar": f"value {i} é",
        "text": f"value {i} é",
        "ascii": f"value {i}",
        "int": 1_000 + i,
        "bigint": 2**40 + i,
        "counter": 3 + i,
        "smallint": i,
        "tinyint": i,
        "boolean": i % 2 == 0,
        "blob": bytes([i % 256]) * 3,
        "double": i + 0.25,
        "float": i + 0.5,
        "timestamp": datetime(2026, 12, 5, 9, 30, i % 60, 123_456 + i, tzinfo=UTC),
    }
    if cql_type in scalars:
        return scalars[cql_type]
    outer, _, inner = cql_type.partition("<")
    parts = [p.strip() for p in inner.rstrip(">").split(",")]
    if outer in ("set", "frozen<set"):
        return {_sample(parts[0], i), _sample(parts[0], i + 1)}
    if outer == "list":
        return [_sample(parts[0], i), _sample(parts[0], i + 1)]
    if outer == "map":
        return {_sample(parts[0], i): _sample(parts[1], i)}
    raise AssertionError(f"no sample value for CQL type {cql_type}: add one")


async def test_every_prepared_statement_binds_to_the_drivers_bytes(settings: Settings) -> None:
    found = pkgutil.iter_modules(tickwheel.store.__path__, "tickwheel.store.")
    modules = [importlib.import_module(module.name) for module in found]
    statements = statements_of(*modules)  # every statement kept as a constant, the processes' start-up lists among them
    store = await CassandraStore.connect(settings.cassandra)
    try:
        checked, timestamps = 0, 0
        for cql in statements:
            prepared = await store.prepare(cql)
            types = [column.type.cql_parameterized_type() for column in prepared.column_metadata]
            fast = [serializer_of(column.type) is serialize_timestamp for column in prepared.column_metadata]
            assert fast == [t == "timestamp" for t in types], cql  # the serializer this replaces, on every timestamp
            params = [_sample(t, i) for i, t in enumerate(types)]
            ours, theirs = Binding(prepared).bind(params), prepared.bind(params)
            assert ours.values == theirs.values, cql
            assert ours.routing_key == theirs.routing_key, cql
            with_nulls = [None if i % 2 else v for i, v in enumerate(params)]
            assert Binding(prepared).bind(with_nulls).values == prepared.bind(with_nulls).values, cql
            assert (await store.bound(cql, params)).values == theirs.values
            checked += 1
            timestamps += types.count("timestamp")
        assert checked == len(statements) > 45
        assert timestamps > 50  # the serializer this replaces is the timestamp's: it is what is compared most
    finally:
        await store.close()
