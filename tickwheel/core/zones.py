"""IANA time zones: loading by name and mapping a naive wall-clock reading to real instants.

A reading is `unique` (one instant), in a `gap` (clocks jumped over it: no instant shows it) or `repeated`
(clocks were set back: two instants show it, `first` before the change and `second` after).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickwheel.core.errors import ScheduleError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Reading(StrEnum):
    """How a naive wall-clock reading relates to real instants in a zone."""

    UNIQUE = "unique"
    GAP = "gap"
    REPEATED = "repeated"


@dataclass(frozen=True, slots=True)
class Resolved:
    """The instants (UTC) showing a reading: `first`/`second` differ only when repeated; for a gap both are
    the first instant after the gap (the transition itself)."""

    kind: Reading
    first: datetime
    second: datetime


@functools.lru_cache(maxsize=1024)
def load_zone(name: str, field: str = "schedule.tz") -> ZoneInfo:
    """The IANA zone called `name`, or ScheduleError naming `field` when there is no such zone."""
    if not name or name != name.strip() or ".." in name or name.startswith("/"):
        raise ScheduleError(field, f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(field, f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris'") from None


def resolve(local: datetime, tz: tzinfo) -> Resolved:
    """Map the naive reading `local` in `tz` to UTC instants (see the module docstring)."""
    off0 = _offset(local.replace(tzinfo=tz, fold=0))
    off1 = _offset(local.replace(tzinfo=tz, fold=1))
    first = (local - off0).replace(tzinfo=UTC)
    if off0 == off1:
        return Resolved(Reading.UNIQUE, first, first)
    second = (local - off1).replace(tzinfo=UTC)
    if off0 > off1:
        return Resolved(Reading.REPEATED, first, second)
    after_gap = transition_between(second, first, tz)
    return Resolved(Reading.GAP, after_gap, after_gap)


def transition_between(lo: datetime, hi: datetime, tz: tzinfo) -> datetime:
    """The first instant in (lo, hi] whose UTC offset differs from lo's (hi when none does), to the second."""
    before = _offset(lo.astimezone(tz))
    lo_s, hi_s = _epoch_s(lo), _epoch_s(hi)
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if _offset(datetime.fromtimestamp(mid, tz)) == before:
            lo_s = mid
        else:
            hi_s = mid
    return EPOCH + timedelta(seconds=hi_s)


def utc_offset_at(at: datetime, tz: tzinfo) -> timedelta:
    """The UTC offset of zone `tz` at the aware instant `at`."""
    return _offset(at.astimezone(tz))


def local_reading(at: datetime, tz: tzinfo) -> datetime:
    """The naive wall-clock reading of the aware instant `at` in `tz`."""
    return at.astimezone(tz).replace(tzinfo=None, fold=0)


def _offset(at: datetime) -> timedelta:
    off = at.utcoffset()
    assert off is not None  # zoneinfo always answers for aware datetimes
    return off


def _epoch_s(at: datetime) -> int:
    return (at - EPOCH) // timedelta(seconds=1)
