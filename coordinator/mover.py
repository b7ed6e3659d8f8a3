"""The far-horizon mover (active coordinator only): every `far_move_interval_s`, writes the runs waiting in
`runs_far` into their minute buckets once their day starts before now + `core.horizon.MOVE_LEAD`, then drops the
moved partitions. Which days to move is the pure `core.horizon.days_to_move`."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime, timedelta

from tickwheel import metrics
from tickwheel.bus.near import NearAnnouncer
from tickwheel.bus.ports import Publisher
from tickwheel.core.horizon import days_to_move
from tickwheel.settings import Settings
from tickwheel.store.buckets import due_run_for
from tickwheel.store.ports import FarStore
from tickwheel.tenancy import TenantCache

log = logging.getLogger(__name__)

READS_IN_FLIGHT = 32


class FarMover:
    """Moves far-horizon runs into their buckets; remembers the last day it finished (a new leader starts again
    `far_lookback_days` back: moving is idempotent)."""

    def __init__(self, settings: Settings, store: FarStore, producer: Publisher):
        self.settings = settings
        self.store = store
        self.near = NearAnnouncer(settings, producer)
        self.lookback = timedelta(days=settings.coordinator.far_lookback_days)
        self.moved_through: datetime | None = None
        self.tenants = TenantCache(store)

    def forget(self) -> None:
        """Leadership lost: the next leader term starts from the lookback again."""
        self.moved_through = None

    async def move(self, now: datetime) -> int:
        """Move every day due for moving; returns how many runs now have their bucket row."""
        moved = 0
        for day in days_to_move(now, self.moved_through, self.lookback):
            moved += await self._move_day(day, now)
            self.moved_through = day
        return moved

    async def _move_day(self, day: datetime, now: datetime) -> int:
        gate = asyncio.Semaphore(READS_IN_FLIGHT)

        async def one(shard: int) -> int:
            async with gate:
                waiting = await self.store.read_far_day(day, shard)
                moved = 0
                for waiting_run in waiting:
                    retention_s = await self.tenants.run_retention_s(
                        waiting_run.tenant_id, self.settings.retention.runs_days
                    )
                    run = replace(waiting_run, retention_s=retention_s)  # the row it may write again keeps it
                    if await self.store.move_far_run(run, now):
                        moved += 1
                        self.near.announce_if_near(due_run_for(run), now)
                if waiting:
                    await self.store.delete_far_day(day, shard)
                    metrics.far_moved.labels(result="moved").inc(moved)
                    metrics.far_moved.labels(result="dropped").inc(len(waiting) - moved)
                return moved

        moved = sum(await asyncio.gather(*(one(shard) for shard in range(self.settings.shards))))
        if moved:
            log.info("moved %d far-horizon runs of %s into their buckets", moved, day.date().isoformat())
        return moved
