"""A hierarchical timing wheel: O(1) insert and cancel, due entries returned in due-time order.

Layout: `levels` rings of buckets. Level 0 buckets are one tick each; a level-n bucket spans wheel_size**n ticks
(wheel_size a power of two). Each ring has 2 * wheel_size slots: it holds the children of its parent's current
bucket and, once moved down, of the next one. `_open[n]` is the last level-n bucket already moved down; an entry
sits in the lowest ring whose parent bucket is open. During the first three quarters of each level-n bucket the
next one is moved down a little on every advance (in insertion order), so entering a bucket costs nothing: there is no
cascade stall. Entries beyond the top ring wait in an overflow dict, scanned when the clock enters a new top
bucket (every wheel_size**levels ticks: 2.2 years at 1 ms, 512 slots, 4 levels). Entries due at or before the
current tick wait in `past` and come out first on the next advance.

Every bucket is a dict key -> (due_ms, key, value) and an index maps each key to the dict holding it, so the
same key is kept once and cancel is a dict delete. Dict order is insertion order, and entries always reach a
bucket (by moving down) before any direct insert can, so equal due times come out in insertion order.
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import islice
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
MIN_MOVE = 256  # entries moved down per advance at least, while a move is in progress


class TimingWheel(Generic[K, V]):
    """Timers keyed by K carrying V; `advance(now_ms)` returns `(due_ms, key, value)` for everything due."""

    __slots__ = (
        "_bits",
        "_index",
        "_levels",
        "_mask",
        "_mask2",
        "_now",
        "_open",
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
        self._mask2 = 2 * wheel_size - 1
        self._levels = levels
        self._now = (start_ms + 1) // tick_ms - 1  # every tick <= _now has been returned
        self._rings: list[list[dict[K, tuple[int, K, V]]]] = [
            [{} for _ in range(2 * wheel_size)] for _ in range(levels)
        ]
        start = self._now + 1
        self._open = [start >> (self._bits * level) for level in range(levels + 1)]  # [0] unused
        self._paced_at = [self._now] * (levels + 1)
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
            bucket = self._rings[0][now_ms & self._mask2]
            fired = self._take(bucket, sort=False) if bucket else []
            if self._levels > 1 and (self._open[1] <= now_ms >> self._bits or not now_ms & 63):
                self._move_down_step()
            return fired
        out: list[tuple[int, K, V]] = []
        if self._past:
            out.extend(self._take(self._past, sort=True))
        last_full_tick = (now_ms + 1) // self._tick_ms - 1
        self._run_ticks(last_full_tick, out)
        if self._tick_ms > 1 and (last_full_tick + 1) * self._tick_ms <= now_ms:
            out.extend(self._take_due(self._rings[0][(last_full_tick + 1) & self._mask2], now_ms))
        self._move_down_step()
        return out

    def next_due_ms(self) -> int | None:
        """The exact earliest pending due time (None when empty); scans at most one ring per level."""
        if self._past:
            return min(entry[0] for entry in self._past.values())
        bounds: list[tuple[int, int, dict[K, tuple[int, K, V]]]] = []
        for level in range(self._levels):
            first = self._first_bucket(level)
            if first is not None:
                bounds.append((first[0] << (self._bits * level), level, first[1]))
        best: int | None = None
        for lower, _, bucket in sorted(bounds, key=lambda b: (b[0], b[1])):
            if best is not None and lower * self._tick_ms > best:
                break
            due = min(entry[0] for entry in bucket.values())
            best = due if best is None else min(best, due)
        if best is None and self._overflow:
            best = min(entry[0] for entry in self._overflow.values())
        return best

    def _first_bucket(self, level: int) -> tuple[int, dict[K, tuple[int, K, V]]] | None:
        """The first non-empty bucket of a ring, in time order, with its bucket number."""
        ring = self._rings[level]
        for number in self._bucket_numbers(level):
            bucket = ring[number & self._mask2]
            if bucket:
                return number, bucket
        return None

    def _bucket_numbers(self, level: int) -> range:
        """Bucket numbers a ring can hold now: from the current one to the end of the open parents."""
        start, bits = self._now + 1, self._bits
        current = start >> (bits * level)
        parent_open = self._open[level + 1] if level + 1 < self._levels else current >> bits
        return range(current, (parent_open + 1) << bits)

    def _run_ticks(self, target: int, out: list[tuple[int, K, V]]) -> None:
        """Return every entry of ticks up to `target` into `out`, crossing bucket boundaries as it goes."""
        ring0, mask, mask2, sort = self._rings[0], self._mask, self._mask2, self._tick_ms > 1
        while self._now < target:
            start = self._now + 1
            end = min(target, start | mask)
            if end - start < 32 or any(ring0):
                for tick in range(start, end + 1):
                    bucket = ring0[tick & mask2]
                    if bucket:
                        out.extend(self._take(bucket, sort=sort))
            else:
                end = self._idle_until(target)
            self._now = end
            if not (end + 1) & mask:
                self._cross(end + 1)
            else:
                self._open_up_to(end + 1)  # an idle jump may land inside a later, empty, revolution

    def _idle_until(self, target: int) -> int:
        """With level 0 empty, the last tick before the next non-empty bucket begins (or `target`)."""
        best = target
        for level in range(1, self._levels):
            first = self._first_bucket(level)
            if first is not None:
                best = min(best, (first[0] << (self._bits * level)) - 1)
        if self._overflow:
            top = self._bits * self._levels
            best = min(best, ((((self._now + 1) >> top) + 1) << top) - 1)
        return max(best, self._now + 1)

    def _open_up_to(self, start: int) -> None:
        for level in range(1, self._levels):
            current = start >> (self._bits * level)
            if current > self._open[level]:
                self._open[level] = current
                self._paced_at[level] = start - 1

    def _move_down_step(self) -> None:
        """Move part of each level's next bucket down one level, paced to be done three quarters through."""
        start, bits = self._now + 1, self._bits
        for level in range(self._levels - 1, 0, -1):  # parents first
            current = start >> (bits * level)
            following = current + 1
            if self._open[level] != current:
                continue  # already moved
            parent_open = self._open[level + 1] if level + 1 < self._levels else current >> bits
            if following >> bits > parent_open:
                continue  # its entries are still one level up
            source = self._rings[level][following & self._mask2]
            span = 1 << (bits * level)
            deadline = current * span + span - max(1, span // 4)  # leaves the last quarter for the level below
            if start >= deadline:
                budget = len(source)
            else:
                paced = max(self._paced_at[level], current * span - 1)
                budget = max(MIN_MOVE, -(-len(source) * max(1, start - paced) // max(1, deadline - paced)))
            self._paced_at[level] = start
            self._move_down(level, source, budget)
            if not source:
                self._open[level] = following

    def _move_down(self, level: int, source: dict[K, tuple[int, K, V]], budget: int) -> None:
        """Move the first `budget` entries of a level's bucket (in insertion order) into the ring below."""
        ring, mask2, index = self._rings[level - 1], self._mask2, self._index
        tick_ms, shift = self._tick_ms, self._bits * (level - 1)
        for key, entry in list(islice(source.items(), budget)):
            del source[key]
            bucket = ring[((entry[0] // tick_ms) >> shift) & mask2]
            bucket[key] = entry
            index[key] = bucket

    def _bucket(self, tick: int) -> dict[K, tuple[int, K, V]]:
        """The dict an entry due at `tick` belongs in, given the clock position."""
        now = self._now
        if tick <= now:
            return self._past
        bits, opened = self._bits, self._open
        for level in range(self._levels - 1):
            if tick >> (bits * (level + 1)) <= opened[level + 1]:
                return self._rings[level][(tick >> (bits * level)) & self._mask2]
        top = self._levels - 1
        if tick >> (bits * self._levels) == (now + 1) >> (bits * self._levels):
            return self._rings[top][(tick >> (bits * top)) & self._mask2]
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

    def _cross(self, start: int) -> None:
        """The clock enters tick `start`, the first of a revolution: open the buckets it enters and move down
        whatever of them is still up (nothing, when the paced moves kept up)."""
        bits = self._bits
        top = 1
        while top < self._levels and not start & ((1 << (bits * (top + 1))) - 1):
            top += 1
        self._open_up_to(start)
        if top == self._levels and not start & ((1 << (bits * top)) - 1):
            self._redistribute(self._overflow, start >> (bits * top))
        for level in range(min(top, self._levels - 1), 0, -1):
            self._redistribute(self._rings[level][(start >> (bits * level)) & self._mask2], None)

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
