"""The next fire of a cron expression in an IANA zone, applying the DST policy.

The search walks naive wall-clock readings that match the expression (cron.next_match jumps field by field) and
maps each to real instants with zones.resolve:

- fixed-time jobs (hour field not a wildcard) apply the job's gap and repeat policies;
- jobs whose hour field starts with `*` (`*/15 * * * *`, `0 * * * *`) fire at every instant whose wall clock
  matches: a reading inside a gap is shown by no clock and does not fire, a repeated reading fires at both
  instants. That is "by elapsed time": through both changes they never skip and never double.

Readings usually map to instants in order; the exceptions are repeated readings (their second instant comes
after later readings' first) which the search handles with a back-fill probe and a stop bound. Every loop is
bounded (`MAX_CANDIDATES`, cron.MAX_SEARCH_MONTHS), so a search never hangs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from tickwheel.core.cron import CronExpr
from tickwheel.core.policies import DstFlag, DstGapPolicy, DstRepeatPolicy
from tickwheel.core.zones import Reading, Resolved, local_reading, resolve, transition_between, utc_offset_at

MAX_CANDIDATES = 256
ONE_S = timedelta(seconds=1)
SLACK_PROBES = tuple(timedelta(minutes=10 * k) for k in range(1, 19))


@dataclass(frozen=True, slots=True)
class Hit:
    """One fire: the UTC instant and how a DST rule touched it (None when it did not)."""

    at: datetime
    dst: DstFlag | None


@dataclass(frozen=True, slots=True)
class Rules:
    """An expression in a zone with the effective DST policy (elapsed-time jobs: skip gaps, fire both)."""

    expr: CronExpr
    tz: tzinfo
    gap: DstGapPolicy
    repeat: DstRepeatPolicy

    @classmethod
    def of(cls, expr: CronExpr, tz: tzinfo, gap: DstGapPolicy, repeat: DstRepeatPolicy) -> Rules:
        """Effective rules: elapsed-time jobs ignore the job's policies (see the module docstring)."""
        if expr.hour_star:
            return cls(expr, tz, DstGapPolicy.SKIP, DstRepeatPolicy.BOTH)
        return cls(expr, tz, gap, repeat)


def next_hit(rules: Rules, after: datetime) -> Hit | None:
    """The first fire strictly after the aware instant `after`, or None within the search bound."""
    return _next_hit(rules, after.astimezone(UTC))


# The search is pure, and the same question comes again and again: a batch of creates shares its instant and
# usually its schedule, and the jobs of one expression fired at one instant chain to the same next fire. Its
# answers are kept: hashing the key costs a few us, a daily expression's search in a zone with DST ~50 us (17 % of
# the API's CPU per job of a batch; BENCHMARKS.md "The batch endpoint on this box"). The key is the instant in
# UTC: two readings of one wall-clock time that differ only by `fold` compare equal in their own zone.
@functools.lru_cache(maxsize=4096)
def _next_hit(rules: Rules, after: datetime) -> Hit | None:
    search = _Search(rules, after)
    search.backfill()
    search.forward()
    return search.result()


class _Search:
    __slots__ = ("after", "best", "rules", "skipped_gap_at", "stop_reading")

    def __init__(self, rules: Rules, after: datetime) -> None:
        self.rules = rules
        self.after = after.astimezone(UTC)
        self.best: Hit | None = None
        self.stop_reading: datetime | None = None
        self.skipped_gap_at: datetime | None = None

    def backfill(self) -> None:
        """When `after` is a first pass through a repeated hour, earlier readings can still fire (second pass)."""
        if self.rules.repeat is DstRepeatPolicy.FIRST:
            return
        tz = self.rules.tz
        local = self.after.astimezone(tz)
        reading = local.replace(tzinfo=None, fold=0, microsecond=0)
        resolved = resolve(reading, tz)
        if resolved.kind is not Reading.REPEATED or local.fold == 1:
            return
        change = transition_between(self.after, resolved.second, tz)
        candidate = self.rules.expr.next_match(local_reading(change, tz))
        if candidate is not None and candidate <= reading:
            self._offer(Hit(resolve(candidate, tz).second, self._repeat_flag()))

    def forward(self) -> None:
        """Walk matching readings after `after`'s own, keeping the earliest instant, until the stop bound."""
        tz = self.rules.tz
        cursor = self._first_cursor()
        for _ in range(MAX_CANDIDATES):
            candidate = self.rules.expr.next_match(cursor)
            if candidate is None or (self.stop_reading is not None and candidate > self.stop_reading):
                return
            resolved = resolve(candidate, tz)
            for hit in self._hits(resolved):
                self._offer(hit)
            cursor = candidate + ONE_S
            if resolved.kind is Reading.GAP:
                cursor = max(cursor, local_reading(resolved.first, tz))

    def _first_cursor(self) -> datetime:
        """The reading after `after`'s; under FIRST, past the rest of a repeated hour `after` is the second pass of."""
        tz = self.rules.tz
        local = self.after.astimezone(tz)
        reading = local.replace(tzinfo=None, fold=0, microsecond=0)
        cursor = reading + ONE_S
        if self.rules.repeat is not DstRepeatPolicy.FIRST or local.fold == 0:
            return cursor
        resolved = resolve(reading, tz)
        if resolved.kind is not Reading.REPEATED:
            return cursor
        change = transition_between(resolved.first, resolved.second, tz)
        return max(cursor, local_reading(change, tz) + (resolved.second - resolved.first))

    def result(self) -> Hit | None:
        best, skipped = self.best, self.skipped_gap_at
        if best is not None and best.dst is None and skipped is not None and skipped <= best.at:
            return Hit(best.at, DstFlag.AFTER_SKIPPED_GAP)
        return best

    def _hits(self, resolved: Resolved) -> list[Hit]:
        if resolved.kind is Reading.UNIQUE:
            return [Hit(resolved.first, None)]
        if resolved.kind is Reading.GAP:
            if self.rules.gap is DstGapPolicy.RUN_AFTER_GAP:
                return [Hit(resolved.first, DstFlag.SHIFTED)]
            if not self.rules.expr.hour_star and resolved.first > self.after:
                self.skipped_gap_at = self.skipped_gap_at or resolved.first
            return []
        flag = self._repeat_flag()
        if self.rules.repeat is DstRepeatPolicy.FIRST:
            return [Hit(resolved.first, flag)]
        if self.rules.repeat is DstRepeatPolicy.SECOND:
            return [Hit(resolved.second, flag)]
        return [Hit(resolved.first, flag), Hit(resolved.second, flag)]

    def _repeat_flag(self) -> DstFlag:
        both = self.rules.repeat is DstRepeatPolicy.BOTH
        return DstFlag.REPEATED if both else DstFlag.SKIPPED_SIBLING

    def _offer(self, hit: Hit) -> None:
        if hit.at <= self.after or (self.best is not None and hit.at >= self.best.at):
            return
        self.best = hit
        self.stop_reading = local_reading(hit.at, self.rules.tz) + self._slack(hit.at)

    def _slack(self, best_at: datetime) -> timedelta:
        """How much later a reading may be and still map before `best_at` (a fall-back between them)."""
        tz = self.rules.tz
        probes = [self.after] + [best_at - d for d in SLACK_PROBES if best_at - d > self.after]
        highest = max(utc_offset_at(p, tz) for p in probes)
        return max(timedelta(0), highest - utc_offset_at(best_at, tz))
