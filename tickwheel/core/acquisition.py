"""What a dispatcher reads when it takes shards over, and in which order: the minutes around now first, for every
shard it takes, then the backlog since each shard's checkpoint.

A dispatcher that takes shards from a dead or stopped one must re-fire what that one may not have sent (from the
shard's checkpoint minus the grace: minutes) and fire what is due now. Reading all of it before firing any of it
made the runs due now wait for the whole backlog: 512 shards' horizon from their checkpoints took 3-4 s at QUORUM on
a loaded three-node cluster and 21 s at load 65 (BENCHMARKS.md "Nemesis soak, run 6"). So the reads are split:

1. `first_reads`: [now - lookback, until) for every shard taken, one read per minute and group of shards, the minute
   holding now first, then the one before it (due already), then the later ones. It needs no checkpoint, so it
   runs while the checkpoints are read, and each read's rows are fired as soon as it answers.
2. `backlog_reads`: [start, now - lookback) for each shard whose start (checkpoint minus grace) is earlier, oldest
   first. Nothing is lost: the two spans together are [min(start, now - lookback), until), what one read covered.

The lookback covers the time a dead owner's fires can have stopped before the take-over began (its detection: 1-3 s
for a killed or stopped dispatcher, a session timeout at worst): the runs due meanwhile go out with the first reads.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwheel.core.ids import minute_bucket

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class ShardRead:
    """One read: the rows of `shards` due in [since, until), inside one minute bucket."""

    since: datetime
    until: datetime
    shards: tuple[int, ...]


def first_from(now: datetime, lookback_s: float) -> datetime:
    """Where the first reads begin: `lookback_s` before now."""
    return now - timedelta(seconds=lookback_s)


def first_reads(
    shards: Collection[int], now: datetime, until: datetime, lookback_s: float, per_read: int
) -> list[ShardRead]:
    """The reads of [now - lookback_s, until) for all `shards`, in the order to send them: the minute holding now,
    then the earlier minute (its rows are due already), then the later ones."""
    since = first_from(now, lookback_s)
    current = minute_bucket(now)
    minutes = _minutes(since, until)
    order = sorted(minutes, key=lambda m: (m != current, m > current, m))
    return [read for minute in order for read in _split(minute, since, until, sorted(shards), per_read)]


def backlog_reads(starts: Mapping[int, datetime], before: datetime, per_read: int) -> list[ShardRead]:
    """The reads of [start, before) for each shard whose start is earlier, oldest minute first; a read covers a
    minute for the shards whose span reaches into it (the caller drops rows before a shard's own start)."""
    reads = []
    earliest = min(starts.values(), default=before)
    for minute in _minutes(earliest, before):
        wanted = sorted(s for s, start in starts.items() if start < minute + MINUTE and start < before)
        if not wanted:
            continue
        since = max(minute, min(starts[s] for s in wanted))
        reads.extend(_split(minute, since, before, wanted, per_read))
    return reads


def _minutes(since: datetime, until: datetime) -> list[datetime]:
    """The minute buckets overlapping [since, until)."""
    minute, found = minute_bucket(since), []
    while minute < until:
        found.append(minute)
        minute += MINUTE
    return found


def _split(minute: datetime, since: datetime, until: datetime, shards: list[int], per_read: int) -> list[ShardRead]:
    """[since, until) cut to `minute`, one read per group of `per_read` shards (none when the cut is empty)."""
    start, end = max(since, minute), min(until, minute + MINUTE)
    if start >= end:
        return []
    return [ShardRead(start, end, tuple(shards[i : i + per_read])) for i in range(0, len(shards), per_read)]
