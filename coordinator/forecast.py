"""The peak forecast: how many runs are due in each of the next N minutes, for pre-scaling workers."""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwheel import metrics
from tickwheel.store import buckets
from tickwheel.store.cassandra import CassandraStore


async def forecast(store: CassandraStore, now: datetime, minutes: int, shards: int) -> list[int]:
    """Runs due in minute k (k = 0 is the current minute) for k < `minutes`, over all shards; also published as
    metrics.forecast_due{minutes_ahead}. A few multi-partition COUNTs per minute keep it cheap."""
    start = now.replace(second=0, microsecond=0)
    counts = []
    for ahead in range(minutes):
        count = await buckets.count_bucket(store, start + timedelta(minutes=ahead), range(shards))
        metrics.forecast_due.labels(minutes_ahead=str(ahead)).set(count)
        counts.append(count)
    return counts
