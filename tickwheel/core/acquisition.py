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

Where a take-over starts a shard depends on who wrote its checkpoint (`previous_owner`). A dead owner's mark is
re-read from minutes back (`resume_grace_s`). A shard taken from a live member is different: that member keeps firing
it until we have checkpointed it past the move (`dispatcher.owner.Ownership.watch_moves`), and writes its
watermark tagged as handed over when the move reaches it, as a leaving dispatcher does. Re-reading minutes of what
it had already sent made a dispatcher that joined (one SIGKILLed and started again) send every run of its new shards
of the last two or three minutes again, thousands in a burst, each a lane message and a worker's refused claim, and
the runs due meanwhile waited behind them (BENCHMARKS.md "A dispatcher killed and started again").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from tickwheel.core.ids import minute_bucket

MINUTE = timedelta(minutes=1)

LEAVING_TAG = " (leaving)"
"""Appended to the owner of a checkpoint written by a dispatcher handing the shard over (leaving, or moved away)."""
HANDOVER_GRACE_S = 5.0
"""How far before a handed-over mark a new owner starts: its writer acknowledged everything due before it."""


class Previous(Enum):
    """Who wrote the checkpoint of a shard being taken over, as the new owner sees it."""

    HANDED_OVER = "handed over"
    """Tagged: written by a member handing the shard over (a leaving one, or one the assignment moved it off), which
    had every run due before the mark acknowledged and keeps firing the shard until we have taken it."""
    LIVE = "live"
    """Another member of the assignment being applied, not tagged (yet): alive when the assignment was published,
    so it fires the shard until we take it, and its tagged mark is on its way."""
    GONE = "gone"
    """Anyone else (a member since evicted or dead, or no checkpoint): what it may not have sent must go out again."""


def previous_owner(owner: str | None, live: Collection[str], member: str | None) -> Previous:
    """How a take-over reads a checkpoint written by `owner` (None: no checkpoint), given the members of the assignment
    being applied (`live`) and our own member name. Our own mark is GONE: we dropped that shard, and whoever had it
    since may not have checkpointed it."""
    if owner is None:
        return Previous.GONE
    if owner.endswith(LEAVING_TAG):
        return Previous.HANDED_OVER
    return Previous.LIVE if owner != member and owner in live else Previous.GONE


def resume_grace_s(previous: Previous, grace_s: float) -> float:
    """How far before the checkpoint a take-over starts: seconds after a handover (the writer acknowledged all that
    was due before its mark), `grace_s` (minutes) after an owner that may have died with runs unsent."""
    return grace_s if previous is Previous.GONE else min(grace_s, HANDOVER_GRACE_S)


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
