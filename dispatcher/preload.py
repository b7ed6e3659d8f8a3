"""Pure preload decisions: how far the loaded horizon reaches, how a scan groups its shards into reads, which
near-term announcements to take, and where each row goes in the wheel (spread inside its delay tolerance when its
second is over capacity)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from schemas.messages import DueRun
from tickwheel.core.peaks import spread_fire_ms
from tickwheel.store.records import DueKey

Key = tuple[uuid.UUID, int, str, int]

# A scan reads its shards in groups, one `shard IN ?` read per group and minute: 1,024 shards are 16 reads, where
# one read per shard made the idle scans and rescans ~50 reads/s per dispatcher (BENCHMARKS.md "Cost per run,
# round 4"). A group stays small enough that the read's coordinator, which waits for every partition of it, answers
# within the request timeout at peak (64 shard-minutes of a 100k-run minute are ~6,000 rows, paged).
SHARDS_PER_READ = 64


def key_of(run: DueRun | DueKey) -> Key:
    """The wheel key. fire_at is part of it: a deferral or a lease extension writes another row for the same
    (run, attempt, kind) at a later instant, and that row must fire too."""
    return (run.run_id, run.attempt, run.kind, run.fire_at_ms)


def loadable_until(now: datetime, horizon_s: float) -> datetime:
    """The exclusive end of the loaded horizon: whole minutes whose end is within now + horizon.

    Loading a minute only once all of it is inside the horizon means a run the API did not announce (its
    fire_at was beyond the API's now + horizon) was written before the minute was read.
    """
    return (now + timedelta(seconds=horizon_s)).replace(second=0, microsecond=0)


def accept_near(run: DueRun, owned: Iterable[int] | Mapping[int, object], loaded_until_ms: int | None) -> bool:
    """Take an announcement only for an owned shard inside the loaded horizon; a later scan sees the others."""
    return loaded_until_ms is not None and run.shard in owned and run.fire_at_ms < loaded_until_ms


def plan_inserts(
    runs: list[DueRun], load_before: Mapping[int, int], capacity_per_s: int
) -> tuple[list[tuple[int, DueRun]], Counter[int]]:
    """(wheel due ms, run) for each run, and the added load per second. Runs with a tolerance in a second that
    holds more than `capacity_per_s` (counting what is already loaded) are spread deterministically; urgent
    runs (tolerance 0) keep their time."""
    added: Counter[int] = Counter(run.fire_at_ms // 1000 for run in runs)
    planned = []
    for run in runs:
        second = run.fire_at_ms // 1000
        load = load_before.get(second, 0) + added[second]
        fire_ms = spread_fire_ms(run.fire_at_ms, run.tolerance_ms, run.run_id, load, capacity_per_s)
        planned.append((fire_ms, run))
    return planned, added


def groups_of(since: Mapping[int, datetime], until: datetime) -> list[tuple[datetime, list[int]]]:
    """The reads of a scan: (start, up to `SHARDS_PER_READ` shards) for the shards whose `since` falls in the same
    minute, from the earliest of them (the others' rows before their own `since` are one minute's at most, and
    dropped by `dispatcher.horizon.Horizon.read`); shards with nothing before `until` are left out."""
    by_minute: dict[datetime, list[int]] = {}
    for shard, start in since.items():
        if start < until:
            by_minute.setdefault(start.replace(second=0, microsecond=0), []).append(shard)
    groups = []
    for _, shards in sorted(by_minute.items()):
        ordered = sorted(shards)
        for first in range(0, len(ordered), SHARDS_PER_READ):
            group = ordered[first : first + SHARDS_PER_READ]
            groups.append((min(since[shard] for shard in group), group))
    return groups
