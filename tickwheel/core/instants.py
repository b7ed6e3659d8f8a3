"""Instants: parsing what users write (ISO-8601 with an offset, or with an IANA zone in brackets) and the one
set of conversions between aware UTC datetimes and epoch milliseconds (what messages and the store carry)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from tickwheel.core.errors import ScheduleError
from tickwheel.core.zones import load_zone, resolve

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(at: datetime) -> int:
    """Milliseconds since the Unix epoch of the aware instant `at` (rounded down)."""
    if at.tzinfo is None:
        raise ValueError("epoch_ms needs an aware datetime")
    return (at - EPOCH) // _MS


def from_epoch_ms(ms: int) -> datetime:
    """The aware UTC instant `ms` milliseconds after the Unix epoch (exact: no float on the way)."""
    return EPOCH + ms * _MS


def whole_ms(at: datetime) -> datetime:
    """`at` truncated to the millisecond: what a Cassandra timestamp or an `*_ms` field holds of it."""
    if at.microsecond % 1000 == 0:  # most instants it is given are whole already: no copy
        return at
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


_BRACKETED = re.compile(r"^(?P<stamp>[^\[\]]+)(?:\[(?P<zone>[^\[\]]+)\])?$")


def parse_instant(text: str, *, field: str = "schedule.run_at") -> datetime:
    """Parse `2026-03-08T02:30:00-05:00`, `...Z` or `2026-03-08T02:30:00[America/New_York]` to an aware UTC
    datetime; a zoned local time in a DST gap means the first instant after it, a repeated one its first."""
    try:
        return _parse_instant(text, field)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
        raise ScheduleError(field, f"{text!r} is outside the range of representable instants") from None


def _parse_instant(text: str, field: str) -> datetime:
    match = _BRACKETED.match(text.strip())
    if match is None:
        raise ScheduleError(field, f"{text!r} is not an ISO-8601 instant")
    stamp = _fromiso(match["stamp"], field)
    if match["zone"] is None:
        if stamp.tzinfo is None:
            raise ScheduleError(field, f"{text!r} has no offset; add one (Z, +02:00) or a zone such as [Europe/Paris]")
        return stamp.astimezone(UTC)
    tz = load_zone(match["zone"], field)
    if stamp.tzinfo is None:
        return resolve(stamp, tz).first
    if stamp.astimezone(tz).utcoffset() != stamp.utcoffset():
        raise ScheduleError(field, f"{text!r}: the offset does not match zone {match['zone']} at that time")
    return stamp.astimezone(UTC)


def format_instant(at: datetime, tz: tzinfo = UTC) -> str:
    """RFC 3339 with an explicit offset and millisecond precision, in `tz` (UTC by default)."""
    return at.astimezone(tz).isoformat(timespec="milliseconds")


def require_aware(at: datetime, field: str) -> None:
    """Raise ScheduleError naming `field` unless `at` is timezone-aware."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ScheduleError(field, "needs a time zone offset (naive datetimes are ambiguous)")


def _fromiso(stamp: str, field: str) -> datetime:
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        raise ScheduleError(field, f"{stamp!r} is not an ISO-8601 date-time") from None
