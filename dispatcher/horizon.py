"""Filling the wheel: the preload horizon moved minute by minute, the near-term topic's rows taken as they are
announced, and the rescan of the current minute that catches what both missed. Which rows are taken is decided
by the pure functions of `dispatcher.preload`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import TypeVar

from dispatcher.preload import accept_near, groups_of, key_of, loadable_until
from dispatcher.shards import Clock, ShardTable
from schemas.messages import DueRun
from tickwheel import metrics
from tickwheel.bus.ports import NearTermFeed
from tickwheel.core.acquisition import ShardRead
from tickwheel.core.ids import epoch_ms
from tickwheel.settings import DispatcherSettings
from tickwheel.store.ports import DueRowStore
from tickwheel.store.records import DueKey

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
READS_IN_FLIGHT = 8
R = TypeVar("R", DueRun, DueKey)  # a whole due row, or its name


class Horizon:
    """Reads the owned shards' due rows into the wheel up to `table.loaded_until`, and keeps it moving."""

    def __init__(
        self, table: ShardTable, store: DueRowStore, near: NearTermFeed, cfg: DispatcherSettings, clock: Clock
    ):
        self.table, self.store, self.near, self.cfg, self.clock = table, store, near, cfg, clock

    async def read(self, since: Mapping[int, datetime], until: datetime) -> list[DueRun]:
        """The due rows of each shard from its `since` to `until`, read in groups (`groups_of`), a few at once;
        a row a group's read finds before its own shard's `since` is left out."""
        return await self._grouped(self.store.read_shards, since, until)

    async def read_keys(self, since: Mapping[int, datetime], until: datetime) -> list[DueKey]:
        """The names of the rows `read` would return."""
        return await self._grouped(self.store.read_keys, since, until)

    async def _grouped(
        self, reader: Callable[[list[int], datetime, datetime], Awaitable[list[R]]], since: Mapping[int, datetime],
        until: datetime,
    ) -> list[R]:  # fmt: skip
        gate = asyncio.Semaphore(READS_IN_FLIGHT)

        async def one(start: datetime, shards: list[int]) -> list[R]:
            async with gate:
                return await reader(shards, start, until)

        pages = await asyncio.gather(*(one(start, shards) for start, shards in groups_of(since, until)))
        starts_ms = {shard: epoch_ms(start) for shard, start in since.items()}
        return [row for page in pages for row in page if row.fire_at_ms >= starts_ms[row.shard]]

    async def load(self, reads: list[ShardRead], starts: Awaitable[Mapping[int, datetime]]) -> int:
        """Send `reads` a few at once, in their order, and insert each one's rows as soon as it answers (from their
        shard's start in `starts`, awaited before the first insert); how many rows were new."""
        gate = asyncio.Semaphore(READS_IN_FLIGHT)  # FIFO: the reads go out in the order given
        shared = asyncio.ensure_future(starts)

        async def one(read: ShardRead) -> int:
            async with gate:
                rows = await self.store.read_shards(read.shards, read.since, read.until)
            since = await shared
            return self.table.insert_all([run for run in rows if run.fire_at_ms >= epoch_ms(since[run.shard])])

        tasks = [asyncio.ensure_future(one(read)) for read in reads]
        try:
            return sum(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def extend(self) -> None:
        """Read the minutes between the loaded horizon and the one the clock now allows."""
        table = self.table
        async with table.scan_lock:
            now = self.clock.now()
            target = loadable_until(now, self.cfg.preload_horizon_s)
            previous = table.loaded_until
            if previous is None or target <= previous:
                return
            table.loaded_until = target  # before reading: announcements for these minutes are taken from now on
            started = time.perf_counter()
            try:
                runs = await self.read({s: max(previous, st.start) for s, st in table.owned.items()}, target)
            except BaseException:
                table.loaded_until = previous
                raise
            table.insert_all(runs)
            minutes = max(1, (target - previous) // MINUTE)
            for _ in range(minutes):
                metrics.preload_seconds.observe((time.perf_counter() - started) / minutes)
            table.prune(now)

    async def near_loop(self) -> None:
        """Take the near-term topic's rows as they come (a failed poll is retried after a second)."""
        while True:
            try:
                runs = await self.near.poll()
            except Exception as exc:
                log.warning("near-term poll failed: %s", exc)
                await self.clock.sleep(1.0)
                continue
            if not runs:
                if not self.near.positions:  # nothing assigned: poll returns at once
                    await self.clock.sleep(0.1)
                continue
            self.take_near(runs)

    def take_near(self, runs: list[DueRun]) -> None:
        """Insert the announced rows of owned shards inside the loaded horizon (beyond it the preload reads them)."""
        loaded_until = self.table.loaded_until
        until_ms = epoch_ms(loaded_until) if loaded_until else None
        accepted = [run for run in runs if accept_near(run, self.table.owned, until_ms)]
        inserted = self.table.insert_all(accepted)
        metrics.near_received.labels(result="inserted").inc(inserted)
        metrics.near_received.labels(result="duplicate").inc(len(accepted) - inserted)
        metrics.near_received.labels(result="ignored").inc(len(runs) - len(accepted))

    async def rescan(self) -> int:
        """Read the current minute again, and the one before while the last rescan may have been in it; anything
        neither in the wheel nor fired is a miss caught late."""
        table = self.table
        async with table.scan_lock:
            if table.loaded_until is None:
                return 0
            now = self.clock.now()
            # A row written after the last rescan of its minute and due later in that same minute, whose
            # announcement failed, was in no later read: the next rescan reads the next minute (run 11 of the
            # soak: two runs 388 s late, found only by the sweeper). So read back to the previous rescan.
            since = (now - timedelta(seconds=self.cfg.rescan_interval_s)).replace(second=0, microsecond=0)
            until = min(now.replace(second=0, microsecond=0) + MINUTE, table.loaded_until)
            spans = {s: max(since, st.start) for s, st in table.owned.items() if st.scanned}
            # The names first: nearly every row is in the wheel or fired, and a whole row carries its definition.
            # Only the shards with a row the wheel does not know are read whole.
            names = await self.read_keys(spans, until)
            unknown = {key.shard for key in names if not table.is_known(key_of(key), key.shard)}
            if not unknown:
                return 0
            runs = await self.read({s: spans[s] for s in unknown}, until)
            # Lease checks due a minute or more after their claim are left for the rescan by design (never
            # announced: `NearAnnouncer.rescan_finds`); only other rows found here were missed.
            table.insert_all([run for run in runs if run.kind == "lease_check"])
            others = [run for run in runs if run.kind != "lease_check"]
            missed = [run for run in others if not table.is_known(key_of(run), run.shard)]
            found = table.insert_all(others)
        if found:
            metrics.rescan_found.inc(found)
            # A run found before it is due still fires on time: most are rows written just before the read, whose
            # announcement was on its way (every step's start at 300 runs/s warned of a few). Only runs found
            # already due were delivered late, which is what someone must look at.
            now_ms = epoch_ms(now)
            late = [run for run in missed if run.fire_at_ms <= now_ms]
            log.log(
                logging.WARNING if late else logging.INFO,
                "rescan found %d runs that neither the preload nor the near-term topic delivered, %d already due: %s",
                found,
                len(late),
                ", ".join(
                    f"{r.run_id} {r.kind} #{r.attempt} shard {r.shard} due {r.fire_at_ms}" for r in (late or missed)[:5]
                ),
            )  # which ones, so a trace can follow them through the API's, workers' and dispatchers' logs
        return found
