"""Upcoming load: how many occurrences of a set of schedules fall in each bucket of a window (pure).

Only the next run of a job is ever written ahead, so the runs a tenant will have in the coming hours and days
are projected from its schedules. The projection walks occurrences one by one, so it takes a step budget and
says when it ran out rather than taking unbounded time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwheel.core.instants import require_aware
from tickwheel.core.schedule import ONE_US, next_fire
from tickwheel.core.specs import Schedule


@dataclass(frozen=True, slots=True)
class DueCounts:
    """Occurrences per bucket: `counts[i]` falls in [start + i * bucket_s, start + (i + 1) * bucket_s)."""

    start: datetime
    bucket_s: int
    counts: tuple[int, ...]
    schedules: int
    truncated: bool
    """The step budget ran out: the counts are a lower bound."""


def due_counts(
    schedules: Iterable[tuple[Schedule, int]],
    start: datetime,
    bucket_s: int,
    buckets: int,
    *,
    max_steps: int,
    since: datetime | None = None,
) -> DueCounts:
    """Count the occurrences of each (schedule, fires so far) in `buckets` buckets of `bucket_s` from `start`;
    with `since` (inside the first bucket, e.g. now), only occurrences from then on."""
    require_aware(start, "start")
    first = start if since is None else max(start, since)
    end = start + timedelta(seconds=bucket_s * buckets)
    counts = [0] * buckets
    steps, seen, truncated = 0, 0, False
    for schedule, fired_count in schedules:
        seen += 1
        at = next_fire(schedule, first - ONE_US, fired_count=fired_count)
        while at is not None and at < end:
            if steps >= max_steps:
                truncated = True
                break
            steps += 1
            counts[int((at - start).total_seconds()) // bucket_s] += 1
            fired_count += 1
            at = next_fire(schedule, at, fired_count=fired_count)
        if truncated:
            break
    return DueCounts(start, bucket_s, tuple(counts), seen, truncated)
