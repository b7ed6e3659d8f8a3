"""How far ahead a run's rows are written, and how long they live: retention counts from the due time.

A first attempt due more than FAR_AFTER ahead waits in the far-horizon table (`runs_far`) instead of its minute
bucket; the coordinator's mover writes it into `runs_by_bucket` once its day starts before now + MOVE_LEAD. So
`runs_by_bucket` only holds rows due within days of their write (its 14-day TTL and 1-hour TWCS windows stay
right), and every write of the `runs` / `runs_by_job` / `run_attempts` rows carries a TTL of (due - now) plus the
tenant's run retention (`retention_ttl_s`), so a run's cells expire together whatever its tenant keeps.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

FAR_AFTER = timedelta(days=7)
"""A first attempt due later than now + FAR_AFTER waits in `runs_far` (half of runs_by_bucket's 14-day TTL)."""
MOVE_LEAD = timedelta(days=2)
"""The mover writes a day's runs into their buckets once the day starts before now + MOVE_LEAD."""
RUN_RETENTION = timedelta(days=30)
"""How long a run's rows outlive its due time by default (settings.retention.runs_days; the tables' default TTL)."""
RUN_RETENTION_S = int(RUN_RETENTION.total_seconds())
MAX_TTL_S = 20 * 365 * 86400
"""Cassandra refuses a TTL above 20 years; a run due later is written again by the mover when it moves."""
DAY = timedelta(days=1)


def is_far(fire_at: datetime, now: datetime) -> bool:
    """Whether a first attempt due at `fire_at` waits in the far-horizon table rather than its minute bucket."""
    return fire_at > now + FAR_AFTER


def retention_ttl_s(due: datetime, now: datetime, retention_s: int) -> int:
    """TTL in seconds of a run's rows written at `now`: until `due` plus `retention_s` (its tenant's run
    retention), at least the retention and at most Cassandra's limit."""
    until_due_s = max(0, int((due - now).total_seconds()))
    return min(MAX_TTL_S, until_due_s + retention_s)


def day_of(at: datetime) -> datetime:
    """The far-horizon partition day (UTC midnight) of `at`."""
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def minutes_to_sweep(
    swept_through: datetime | None, now: datetime, grace: timedelta, lookback: timedelta, most: int
) -> list[datetime]:
    """The minute buckets the sweeper's pass reads, oldest first: from `swept_through` (a first pass: the minute of
    now - grace - lookback) to the last minute wholly older than now - `grace`, at most `most` of them (the next
    pass goes on from there)."""
    end = (now - grace).astimezone(UTC).replace(second=0, microsecond=0)  # not wholly past its grace yet
    first = end - lookback if swept_through is None else swept_through
    first = first.astimezone(UTC).replace(second=0, microsecond=0)
    minutes: list[datetime] = []
    while first < end and len(minutes) < most:
        minutes.append(first)
        first += timedelta(minutes=1)
    return minutes


def days_to_move(now: datetime, moved_through: datetime | None, lookback: timedelta) -> list[datetime]:
    """The days the mover still has to move, oldest first: after `moved_through` (a new leader: from the day of
    now - lookback) through the day of now + MOVE_LEAD. No row lands in a day that close (FAR_AFTER exceeds
    MOVE_LEAD plus a day), so a day moved stays moved."""
    first = day_of(now - lookback) if moved_through is None else moved_through + DAY
    last = day_of(now + MOVE_LEAD)
    days = []
    while first <= last:
        days.append(first)
        first += DAY
    return days
