"""The peak forecast: how many runs are due in each of the next N minutes, for pre-scaling workers."""

from __future__ import annotations

from datetime import datetime

from tickwheel import metrics
from tickwheel.store.ports import CoordinatorStore


async def forecast(store: CoordinatorStore, now: datetime, minutes: int, shards: int) -> list[int]:
    """Runs due in minute k (k = 0 is the current minute) for k < `minutes`, over all shards; also published as
    metrics.forecast_due{minutes_ahead}. A few multi-partition COUNTs per minute keep it cheap."""
    counts = await store.due_per_minute(now, minutes, shards)
    for ahead, count in enumerate(counts):
        metrics.forecast_due.labels(minutes_ahead=str(ahead)).set(count)
    return counts
