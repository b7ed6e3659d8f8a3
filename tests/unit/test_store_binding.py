"""store.binding against the driver's own bind, without a server: the same bytes, the same fallbacks."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from cassandra.cqltypes import BooleanType, DateType, Int32Type, SetType, TimestampType, UTF8Type, UUIDType
from cassandra.protocol import ColumnMetadata
from cassandra.query import UNSET_VALUE, PreparedStatement

from tickwheel.store.binding import Binding, serialize_timestamp, serializer_of

TIMESTAMPS = [
    datetime(2026, 12, 5, 9, 30, 1, 999_999, tzinfo=UTC),
    datetime(2026, 12, 5, 9, 30, 1, 1_000, tzinfo=UTC),
    datetime(2026, 12, 5, 9, 30, 1, 999, tzinfo=UTC),
    datetime(2026, 12, 5, 10, 30, 1, 123_456, tzinfo=timezone(timedelta(hours=1))),
    datetime(2026, 12, 5, 4, 0, 0, 500_000, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    datetime(2026, 12, 5, 9, 30, 1, 654_321),  # naive: UTC, as the driver reads it
    datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
]


@pytest.mark.parametrize("value", TIMESTAMPS, ids=str)
def test_a_timestamp_serializes_to_the_drivers_bytes(value: datetime) -> None:
    assert serialize_timestamp(value, 5) == DateType.serialize(value, 5)


@pytest.mark.parametrize("value", [date(2026, 12, 5), 1_796_454_513_000, 1_796_454_513_000.7])
def test_what_is_not_a_datetime_is_the_drivers_to_serialize(value: object) -> None:
    assert serialize_timestamp(value, 5) == DateType.serialize(value, 5)


def _prepared(*types: type) -> PreparedStatement:
    columns = [ColumnMetadata("ks", "t", f"c{i}", t) for i, t in enumerate(types)]
    return PreparedStatement(columns, b"id", [0], "INSERT ...", "ks", 5, None, None)


ROW_TYPES = (UUIDType, DateType, UTF8Type, Int32Type, BooleanType, SetType.apply_parameters([UTF8Type]))


def _row() -> list[object]:
    return [uuid.uuid4(), datetime(2026, 12, 5, 9, 30, 1, 654_321, tzinfo=UTC), "é", 7, True, {"a", "b"}]


def test_a_row_binds_to_the_drivers_values_and_routing_key() -> None:
    prepared = _prepared(*ROW_TYPES)
    for params in (_row(), [None, None, None, None, None, None], [uuid.uuid4(), UNSET_VALUE, "x", 1, False, set()]):
        ours, theirs = Binding(prepared).bind(params), prepared.bind(params)
        assert ours.values == theirs.values
        assert ours.routing_key == theirs.routing_key
        assert ours.raw_values == theirs.raw_values
        assert ours.prepared_statement is prepared and ours.keyspace == "ks"


def test_unset_in_the_routing_key_is_refused_as_the_driver_refuses_it() -> None:
    prepared = _prepared(*ROW_TYPES)
    params = [UNSET_VALUE, *_row()[1:]]
    with pytest.raises(ValueError, match="routing key"):
        prepared.bind(params)
    with pytest.raises(ValueError, match="routing key"):
        Binding(prepared).bind(params)


def test_a_timestamp_column_of_either_driver_class_gets_the_fast_serializer() -> None:
    assert serializer_of(DateType) is serialize_timestamp
    assert serializer_of(TimestampType) is serialize_timestamp
    assert serializer_of(UTF8Type) == UTF8Type.serialize


def test_fewer_params_than_markers_are_padded_as_the_driver_pads_them() -> None:
    prepared = _prepared(*ROW_TYPES)
    params = _row()[:3]
    assert Binding(prepared).bind(params).values == prepared.bind(params).values
    assert Binding(prepared).bind(params).values[3:] == [UNSET_VALUE] * 3


def test_a_value_of_the_wrong_type_is_the_drivers_error_naming_the_column() -> None:
    prepared = _prepared(*ROW_TYPES)
    params = _row()
    params[3] = "seven"
    with pytest.raises(TypeError, match='column "c3"'):
        Binding(prepared).bind(params)
    with pytest.raises(ValueError, match="Too many arguments"):
        Binding(prepared).bind([*_row(), 1])
