"""Pure preload decisions: how far the loaded horizon reaches, which near-term announcements to take, and where
each row goes in the wheel (spread inside its delay tolerance when its second is over capacity)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from schemas.messages import DueRun
from tickwheel.core.peaks import spread_fire_ms

Key = tuple[uuid.UUID, int, str, int]


def key_of(run: DueRun) -> Key:
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
