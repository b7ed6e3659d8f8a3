"""Instants between the driver and the records: the driver returns naive UTC datetimes and binds naive ones as
UTC; everything outside the store works on aware UTC datetimes. Epoch milliseconds live in `core.instants`."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwheel.core.instants import epoch_ms, whole_ms


def aware(value: datetime | None) -> datetime | None:
    """A timestamp read from the driver (naive UTC) as an aware UTC datetime; None stays None."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def read_at(value: datetime) -> datetime:
    """A timestamp column that is never null, as an aware UTC datetime."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def bound(at: datetime) -> datetime:
    """An instant as bound to a statement: naive UTC, whole milliseconds (what Cassandra keeps of it)."""
    return whole_ms(at.astimezone(UTC) if at.tzinfo else at).replace(tzinfo=None)


def epoch_us(at: datetime) -> int:
    """Microseconds since the epoch of `at` at millisecond precision: a statement's write time (USING TIMESTAMP)."""
    return epoch_ms(read_at(at)) * 1000
