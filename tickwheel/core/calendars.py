"""Several calendars per job and the occurrences it must not run: the pure parts of the schedule's union.

A cron job fires on the union of its expressions (its own plus `calendars`, each in its own zone), each instant
once even when two expressions agree (the first expression listed is named as its source). `Exclusions` then
remove fires: local dates or date ranges (holidays, in the exclusions' zone), `except` cron expressions (a fire
whose local reading in that zone matches), and single skipped occurrences (by instant, ms). Every check takes
the fire's instant; none reads a clock.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from tickwheel.core.cron import CronExpr, parse_cron
from tickwheel.core.ids import epoch_ms
from tickwheel.core.zones import load_zone, resolve


@dataclass(frozen=True, slots=True)
class Calendar:
    """One more cron expression the job fires on, read in IANA zone `tz`."""

    expr: str
    tz: str


@dataclass(frozen=True, slots=True)
class DateRange:
    """Local dates `first` to `last`, both included."""

    first: date
    last: date


@dataclass(frozen=True, slots=True)
class Exclusions:
    """Fires the job must not run; local dates and `except` expressions are read in zone `tz`."""

    tz: str = "UTC"
    dates: tuple[DateRange, ...] = ()
    crons: tuple[str, ...] = ()
    skipped_ms: frozenset[int] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.dates or self.crons or self.skipped_ms)

    def search_from(self, at: datetime) -> datetime:
        """Where the search for the next fire goes on after the excluded fire at `at`: past the end of its excluded
        date range (the whole range is passed over at once), else just after `at`."""
        local = at.astimezone(load_zone(self.tz))
        day = local.date()
        ends = [span.last for span in self.dates if span.first <= day <= span.last]
        if not ends:
            return at
        next_day = datetime.combine(max(ends) + timedelta(days=1), time())
        return max(at, resolve(next_day, load_zone(self.tz)).first - timedelta(microseconds=1))

    def reason(self, at: datetime) -> str | None:
        """Why the fire at `at` is excluded (`skipped`, `date 2026-12-25`, `except 0 9 * * 1`), or None."""
        if epoch_ms(at) in self.skipped_ms:
            return "skipped"
        local = at.astimezone(load_zone(self.tz))
        day = local.date()
        for span in self.dates:
            if span.first <= day <= span.last:
                return f"date {span.first}" if span.first == span.last else f"dates {span.first}..{span.last}"
        reading = local.replace(tzinfo=None, fold=0, microsecond=0)
        for text in self.crons:
            if _parsed(text).matches(reading):
                return f"except {text}"
        return None


NO_EXCLUSIONS = Exclusions()


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> CronExpr:
    return parse_cron(text)
