"""A hierarchical timing wheel: O(1) insert and cancel, due entries returned in due-time order.

Layout: `levels` rings of `wheel_size` buckets (a power of two). Level 0 buckets are one tick each; a level-n
bucket spans wheel_size**n ticks. An entry sits in the lowest level whose parent bucket is the one the clock is
in now; when the clock enters a new bucket of a higher level, that bucket's entries move down ("cascade").
Entries beyond the top level wait in an overflow dict, scanned when the clock enters a new top-level bucket
(once every wheel_size**levels ticks: 2.2 years at 1 ms, 512 slots, 4 levels). Entries due at or before the
current tick wait in `past` and come out first on the next advance.

Every bucket is a dict key -> (due_ms, key, value) and an index maps each key to the dict holding it, so the
same key is kept once and cancel is a dict delete. Dict order is insertion order, and cascades always reach a
bucket before any direct insert can, so entries with equal due times come out in insertion order.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TimingWheel(Generic[K, V]):
    """Timers keyed by K carrying V; `advance(now_ms)` returns `(due_ms, key, value)` for everything due."""

    __slots__ = ("_bits", "_index", "_levels", "_mask", "_now", "_overflow", "_past", "_rings", "_tick_ms")

    def __init__(self, tick_ms: int = 1, wheel_size: int = 512, levels: int = 4, start_ms: int = 0) -> None:
        if tick_ms < 1 or levels < 1 or wheel_size < 2 or wheel_size & (wheel_size - 1):
            raise ValueError("tick_ms >= 1, levels >= 1 and wheel_size a power of two >= 2 are required")
        self._tick_ms = tick_ms
        self._bits = wheel_size.bit_length() - 1
        self._mask = wheel_size - 1
        self._levels = levels
        self._now = (start_ms + 1) // tick_ms - 1  # every tick <= _now has been returned
        self._rings: list[list[dict[K, tuple[int, K, V]]]] = [[{} for _ in range(wheel_size)] for _ in range(levels)]
        self._past: dict[K, tuple[int, K, V]] = {}
        self._overflow: dict[K, tuple[int, K, V]] = {}
        self._index: dict[K, dict[K, tuple[int, K, V]]] = {}

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def insert(self, key: K, due_ms: int, value: V) -> bool:
        """Add a timer; False (nothing changes) if `key` is pending. Past-due timers come out on the next advance."""
        index = self._index
        if key in index:
            return False
        bucket = self._bucket(due_ms // self._tick_ms)
        bucket[key] = (due_ms, key, value)
        index[key] = bucket
        return True

    def cancel(self, key: K) -> bool:
        """Remove a pending timer; False if `key` is not pending."""
        bucket = self._index.pop(key, None)
        if bucket is None:
            return False
        del bucket[key]
        return True

    def advance(self, now_ms: int) -> list[tuple[int, K, V]]:
        """Move the clock to `now_ms` and return every pending timer with due_ms <= now_ms, ordered by due time
        (ties in insertion order). The clock never moves back; an earlier `now_ms` only returns past-due inserts."""
        if now_ms == self._now + 1 and self._tick_ms == 1 and not self._past and now_ms & self._mask != self._mask:
            self._now = now_ms  # fast path: one 1-ms tick inside a revolution (the dispatcher's steady state)
            bucket = self._rings[0][now_ms & self._mask]
            return self._take(bucket, sort=False) if bucket else []
        out: list[tuple[int, K, V]] = []
        if self._past:
            out.extend(self._take(self._past, sort=True))
        last_full_tick = (now_ms + 1) // self._tick_ms - 1
        self._run_ticks(last_full_tick, out)
        if self._tick_ms > 1 and (last_full_tick + 1) * self._tick_ms <= now_ms:
            out.extend(self._take_due(self._rings[0][(last_full_tick + 1) & self._mask], now_ms))
        return out

    def _run_ticks(self, target: int, out: list[tuple[int, K, V]]) -> None:
        """Return every entry of ticks up to `target` into `out`, cascading at each revolution."""
        ring0, mask, sort = self._rings[0], self._mask, self._tick_ms > 1
        while self._now < target:
            start = self._now + 1
            end = min(target, start | mask)
            if end - start < 32 or any(ring0):
                for tick in range(start, end + 1):
                    bucket = ring0[tick & mask]
                    if bucket:
                        out.extend(self._take(bucket, sort=sort))
            else:
                end = self._idle_until(target)
            self._now = end
            if not (end + 1) & mask:
                self._cascade(end + 1)

    def _idle_until(self, target: int) -> int:
        """With level 0 empty, the last tick before the next non-empty bucket starts (or `target`)."""
        start, bits, mask = self._now + 1, self._bits, self._mask
        for level in range(1, self._levels):
            shift = bits * level
            ring, here = self._rings[level], (start >> shift) & mask
            for slot in range(here + 1, mask + 1):
                if ring[slot]:
                    parent = start >> (shift + bits) << (shift + bits)
                    return min(target, parent + (slot << shift) - 1)
        if self._overflow:
            top = bits * self._levels
            return min(target, (((start >> top) + 1) << top) - 1)
        return target

    def next_due_ms(self) -> int | None:
        """The exact earliest pending due time (None when empty); costs a scan of at most one ring per level."""
        if self._past:
            return min(entry[0] for entry in self._past.values())
        start = self._now + 1
        for level, ring in enumerate(self._rings):
            shift = self._bits * level
            here = (start >> shift) & self._mask
            for slot in range(here, self._mask + 1):
                if ring[slot]:
                    return min(entry[0] for entry in ring[slot].values())
        if self._overflow:
            return min(entry[0] for entry in self._overflow.values())
        return None

    def _bucket(self, tick: int) -> dict[K, tuple[int, K, V]]:
        """The dict an entry due at `tick` belongs in, given the clock position."""
        now = self._now
        if tick <= now:
            return self._past
        start, bits = now + 1, self._bits
        for level in range(self._levels):
            if (tick >> (bits * (level + 1))) == (start >> (bits * (level + 1))):
                return self._rings[level][(tick >> (bits * level)) & self._mask]
        return self._overflow

    def _take(self, bucket: dict[K, tuple[int, K, V]], *, sort: bool) -> list[tuple[int, K, V]]:
        entries = list(bucket.values())
        index = self._index
        for key in bucket:
            del index[key]
        bucket.clear()
        if sort:
            entries.sort(key=_due)
        return entries

    def _take_due(self, bucket: dict[K, tuple[int, K, V]], now_ms: int) -> list[tuple[int, K, V]]:
        """Entries of a partly elapsed coarse tick that are due by `now_ms`, removed and sorted."""
        entries = sorted((entry for entry in bucket.values() if entry[0] <= now_ms), key=_due)
        for entry in entries:
            del bucket[entry[1]]
            del self._index[entry[1]]
        return entries

    def _cascade(self, start: int) -> None:
        """The clock is entering tick `start`, the first of a level-0 revolution: move buckets down."""
        bits, mask = self._bits, self._mask
        top = 1
        while top < self._levels and not start & ((1 << (bits * (top + 1))) - 1):
            top += 1
        if top == self._levels and not start & ((1 << (bits * top)) - 1):
            self._redistribute(self._overflow, start >> (bits * top))
        for level in range(min(top, self._levels - 1), 1, -1):
            self._redistribute(self._rings[level][(start >> (bits * level)) & mask], None)
        if self._levels > 1:
            self._cascade_into_level0(self._rings[1][(start >> bits) & mask])

    def _cascade_into_level0(self, source: dict[K, tuple[int, K, V]]) -> None:
        """The hot cascade: every entry of the level-1 bucket just entered belongs in level 0."""
        ring0, mask, tick_ms, index = self._rings[0], self._mask, self._tick_ms, self._index
        for key, entry in source.items():
            bucket = ring0[(entry[0] // tick_ms) & mask]
            bucket[key] = entry
            index[key] = bucket
        source.clear()

    def _redistribute(self, source: dict[K, tuple[int, K, V]], top_bucket: int | None) -> None:
        """Re-place the entries of `source` (only those in top-level bucket `top_bucket` when given)."""
        tick_ms, index = self._tick_ms, self._index
        top_shift = self._bits * self._levels
        moved = [
            (key, entry)
            for key, entry in source.items()
            if top_bucket is None or (entry[0] // tick_ms >> top_shift) == top_bucket
        ]
        for key, entry in moved:
            del source[key]
            bucket = self._bucket(entry[0] // tick_ms)
            bucket[key] = entry
            index[key] = bucket


def _due(entry: tuple[int, object, object]) -> int:
    return entry[0]
