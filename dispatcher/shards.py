"""What the engine's parts share: the clocks, and the shard table (the shards owned, the timing wheel holding their
rows, the rows in flight or just fired, the horizon loaded). `Ownership` changes which shards are in it,
`Horizon` fills the wheel, `Firing` empties it, `Checkpointer` writes how far it has fired."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dispatcher.firing import RecentlyFired, Watermarks
from dispatcher.preload import Key, key_of, plan_inserts
from schemas.messages import DueRun
from tickwheel import metrics
from tickwheel.core.ids import epoch_ms
from tickwheel.core.wheel import TimingWheel


@dataclass(frozen=True, slots=True)
class Clock:
    """The wall clock (epoch seconds), the monotonic clock and sleep: injected, so tests can move them."""

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)

    def now_ms(self) -> int:
        """The wall clock in epoch milliseconds."""
        return int(self.wall() * 1000)

    def now(self) -> datetime:
        """The wall clock as an aware UTC instant."""
        return datetime.fromtimestamp(self.wall(), UTC)


@dataclass(frozen=True, slots=True)
class ShardState:
    """One owned shard, as its owner reads it."""

    start: datetime
    """Where this owner began reading the shard (its checkpoint minus the grace)."""
    scanned: bool = False
    """The first scan is done: the shard is covered up to the loaded horizon and may be checkpointed."""


class ShardTable:
    """The owned shards and the rows the engine holds for them. A row enters the wheel once (not while it is in
    the wheel, in flight, or just fired) and only for a shard owned; dropping a shard drops its rows."""

    def __init__(self, clock: Clock, capacity_per_s: int):
        self.clock = clock
        self.capacity_per_s = capacity_per_s
        self.owned: dict[int, ShardState] = {}
        self.loaded_until: datetime | None = None
        """The horizon read into the wheel (None until the first shard is acquired)."""
        self.wheel: TimingWheel[Key, DueRun] = TimingWheel(start_ms=clock.now_ms())
        self.keys_by_shard: dict[int, set[Key]] = defaultdict(set)
        self.watermarks = Watermarks()
        self.recent = RecentlyFired()
        self.load_per_s: Counter[int] = Counter()
        self.fired_through_ms = clock.now_ms()
        self.written: dict[int, int] = {}
        """The watermark last checkpointed, per shard (ms)."""
        self.wake = asyncio.Event()
        """Set when a row due before the fire loop's next wake-up arrives (or firing may resume)."""
        self.sleep_until_ms = 0
        self.scan_lock = asyncio.Lock()
        """Held by an ownership change and by each horizon read: a scan never runs across a change of shards."""

    def is_known(self, key: Key, shard: int) -> bool:
        """In the wheel, just fired, or in flight: inserting it again would fire it twice."""
        return key in self.wheel or key in self.recent or self.watermarks.holds(shard, key)

    def insert_all(self, runs: list[DueRun]) -> int:
        """Insert the rows (spread inside their tolerance past the per-second capacity); how many were new."""
        planned, added = plan_inserts(runs, self.load_per_s, self.capacity_per_s)
        self.load_per_s.update(added)
        inserted = sum(self._insert(fire_ms, run) for fire_ms, run in planned)
        metrics.wheel_size.set(len(self.wheel))
        return inserted

    def _insert(self, fire_ms: int, run: DueRun) -> bool:
        key = key_of(run)
        if run.shard not in self.owned or self.is_known(key, run.shard):
            return False
        self.wheel.insert(key, fire_ms, run)
        self.keys_by_shard[run.shard].add(key)
        if fire_ms != run.fire_at_ms:
            metrics.spread.inc()
            self.watermarks.hold(run.shard, key, run.fire_at_ms)
        if fire_ms < self.sleep_until_ms:
            self.wake.set()
        return True

    def drop_shard(self, shard: int) -> None:
        """Forget the shard and every row of it the wheel holds."""
        self.owned.pop(shard, None)
        for key in self.keys_by_shard.pop(shard, set()):
            self.wheel.cancel(key)
        self.watermarks.drop(shard)
        self.written.pop(shard, None)

    def clear(self) -> None:
        """Forget every shard, the wheel and the horizon (the session is lost)."""
        self.owned.clear()
        self.keys_by_shard.clear()
        self.watermarks.clear()
        self.written.clear()
        self.wheel = TimingWheel(start_ms=self.clock.now_ms())
        self.loaded_until = None
        metrics.owned_shards.set(0)
        metrics.wheel_size.set(0)

    def prune(self, now: datetime) -> None:
        """Forget fires and per-second loads older than they can matter."""
        now_ms = epoch_ms(now)
        self.recent.prune(now_ms)
        oldest = now_ms // 1000 - 120
        for second in [s for s in self.load_per_s if s < oldest]:
            del self.load_per_s[second]
