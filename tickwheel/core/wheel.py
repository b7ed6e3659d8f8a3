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
from itertools import islice
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TimingWheel(Generic[K, V]):
    """Timers keyed by K carrying V; `advance(now_ms)` returns `(due_ms, key, value)` for everything due."""

    __slots__ = (
        "_bits",
        "_index",
        "_levels",
        "_mask",
        "_mask0",
        "_now",
        "_open1",
        "_overflow",
        "_paced_at",
        "_past",
        "_rings",
        "_tick_ms",
    )

    def __init__(self, tick_ms: int = 1, wheel_size: int = 512, levels: int = 4, start_ms: int = 0) -> None:
        if tick_ms < 1 or levels < 1 or wheel_size < 2 or wheel_size & (wheel_size - 1):
            raise ValueError("tick_ms >= 1, levels >= 1 and wheel_size a power of two >= 2 are required")
        self._tick_ms = tick_ms
        self._bits = wheel_size.bit_length() - 1
        self._mask = wheel_size - 1
        self._levels = levels
        self._now = (start_ms + 1) // tick_ms - 1  # every tick <= _now has been returned
        self._mask0 = 2 * wheel_size - 1  # level 0 holds this revolution and, once moved down, the next
        self._rings: list[list[dict[K, tuple[int, K, V]]]] = [
            [{} for _ in range(2 * wheel_size if level == 0 else wheel_size)] for level in range(levels)
        ]
        self._open1 = (self._now + 1) >> self._bits  # level-1 buckets <= this one live in level 0
        self._paced_at = self._now
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
            bucket = self._rings[0][now_ms & self._mask0]
            fired = self._take(bucket, sort=False) if bucket else []
            if self._open1 <= now_ms >> self._bits:
                self._move_next_bucket_down()
            return fired
        out: list[tuple[int, K, V]] = []
        if self._past:
            out.extend(self._take(self._past, sort=True))
        last_full_tick = (now_ms + 1) // self._tick_ms - 1
        self._run_ticks(last_full_tick, out)
        if self._tick_ms > 1 and (last_full_tick + 1) * self._tick_ms <= now_ms:
            out.extend(self._take_due(self._rings[0][(last_full_tick + 1) & self._mask0], now_ms))
        self._move_next_bucket_down()
        return out

    def _run_ticks(self, target: int, out: list[tuple[int, K, V]]) -> None:
        """Return every entry of ticks up to `target` into `out`, cascading at each revolution."""
        ring0, mask, mask0, sort = self._rings[0], self._mask, self._mask0, self._tick_ms > 1
        while self._now < target:
            start = self._now + 1
            end = min(target, start | mask)
            if end - start < 32 or any(ring0):
                for tick in range(start, end + 1):
                    bucket = ring0[tick & mask0]
                    if bucket:
                        out.extend(self._take(bucket, sort=sort))
            else:
                end = self._idle_until(target)
                if (end + 1) >> self._bits > self._open1:  # jumped over empty revolutions
                    self._open1 = (end + 1) >> self._bits
                    self._paced_at = end
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
        start, bits, mask, ring0 = self._now + 1, self._bits, self._mask, self._rings[0]
        found = self._first_min(ring0, range(start, (start | mask) + 1), self._mask0)
        if found is not None:
            return found  # this revolution comes before everything else
        following = range((start | mask) + 1, (start | mask) + mask + 2) if self._open1 > start >> bits else range(0)
        firsts = [self._first_min(ring0, following, self._mask0)]  # the next revolution, moved down early...
        for level in range(1, self._levels):  # ...may interleave with the rest of it still in level 1
            here = (start >> (bits * level)) & mask
            firsts.append(self._first_min(self._rings[level], range(here, mask + 1), mask))
            if any(due is not None for due in firsts):
                return min(due for due in firsts if due is not None)
        if self._overflow:
            return min(entry[0] for entry in self._overflow.values())
        return firsts[0]

    @staticmethod
    def _first_min(ring: list[dict[K, tuple[int, K, V]]], slots: range, mask: int) -> int | None:
        for slot in slots:
            bucket = ring[slot & mask]
            if bucket:
                return min(entry[0] for entry in bucket.values())
        return None

    def _move_next_bucket_down(self) -> None:
        """Move the next level-1 bucket into level 0 a little at a time, done by mid-revolution, so entering
        a revolution costs nothing (without it a cascade of 512 ms of runs stalls the loop)."""
        start, bits = self._now + 1, self._bits
        current = start >> bits
        following = current + 1
        if self._levels < 2 or self._open1 != current or following >> bits != current >> bits:
            return  # already moved, or the next bucket is still in level 2 (moved at the boundary)
        source = self._rings[1][following & self._mask]
        deadline = (current << bits) + ((self._mask + 1) >> 1)
        if start >= deadline:
            budget = len(source)
        else:
            elapsed = max(1, start - self._paced_at)
            budget = max(256, -(-len(source) * elapsed // max(1, deadline - self._paced_at)))
        self._paced_at = start
        self._move_down(source, budget)
        if not source:
            self._open1 = following

    def _move_down(self, source: dict[K, tuple[int, K, V]], budget: int) -> None:
        """Move the first `budget` entries of `source` (in insertion order) into level 0."""
        ring0, mask0, tick_ms, index = self._rings[0], self._mask0, self._tick_ms, self._index
        for key, entry in list(islice(source.items(), budget)):
            del source[key]
            bucket = ring0[(entry[0] // tick_ms) & mask0]
            bucket[key] = entry
            index[key] = bucket

    def _bucket(self, tick: int) -> dict[K, tuple[int, K, V]]:
        """The dict an entry due at `tick` belongs in, given the clock position."""
        now = self._now
        if tick <= now:
            return self._past
        start, bits = now + 1, self._bits
        if tick >> bits <= self._open1:
            return self._rings[0][tick & self._mask0]
        for level in range(1, self._levels):
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
        self._open1 = max(self._open1, start >> bits)
        self._paced_at = start - 1
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
        ring0, mask0, tick_ms, index = self._rings[0], self._mask0, self._tick_ms, self._index
        for key, entry in source.items():
            bucket = ring0[(entry[0] // tick_ms) & mask0]
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
