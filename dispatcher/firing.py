"""Pure firing decisions: the order of a due batch, what must be chained, and the fired-through watermarks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from dispatcher.preload import Key
from schemas.messages import DueRun

LANE_RANK = {"urgent": 0, "default": 1, "bulk": 2}


def fire_order(batch: Iterable[tuple[int, Key, DueRun]]) -> list[tuple[int, Key, DueRun]]:
    """Urgent first, then default, then bulk; by due time within a lane. A burst never delays urgent work."""
    return sorted(batch, key=lambda entry: (LANE_RANK.get(entry[2].lane, 1), entry[0]))


def needs_chain(run: DueRun) -> bool:
    """Only the first attempt of a run row can advance a recurring job (retries and lease checks never do); a row
    that says its job is a once job needs no job read at all."""
    return run.kind == "run" and run.attempt == 0 and run.recurring is not False


def fired(run: DueRun, fired_at_ms: int) -> DueRun:
    return msgspec.structs.replace(run, fired_at_ms=fired_at_ms)


class Watermarks:
    """Rows taken from the wheel (or moved inside their tolerance) and not yet acknowledged by Kafka, per shard.

    A shard's watermark is the earliest due time still unacknowledged, else the time the wheel has fired
    through: a checkpoint never passes a row that may not have gone out.
    """

    def __init__(self) -> None:
        self._pending: dict[int, dict[Key, int]] = {}

    def hold(self, shard: int, key: Key, due_ms: int) -> None:
        """Keep the earliest due time seen for `key` (a retried send keeps its original due time)."""
        self._pending.setdefault(shard, {}).setdefault(key, due_ms)

    def release(self, shard: int, key: Key) -> None:
        pending = self._pending.get(shard)
        if pending is not None:
            pending.pop(key, None)

    def holds(self, shard: int, key: Key) -> bool:
        return key in self._pending.get(shard, {})

    def drop(self, shard: int) -> None:
        self._pending.pop(shard, None)

    def clear(self) -> None:
        self._pending.clear()

    def mark(self, shard: int, fired_through_ms: int) -> int:
        pending = self._pending.get(shard)
        if not pending:
            return fired_through_ms
        return min(fired_through_ms, min(pending.values()))


def checkpoints_due(marks: Mapping[int, int], written: Mapping[int, int], step_ms: int) -> dict[int, int]:
    """The shards whose watermark moved at least `step_ms` since last written (or never written)."""
    return {shard: mark for shard, mark in marks.items() if shard not in written or mark - written[shard] >= step_ms}


class RecentlyFired:
    """Keys fired in the last few minutes, by minute of their due time: the rescan and late announcements must
    not fire again what already went out."""

    def __init__(self, keep_minutes: int = 5) -> None:
        self._by_minute: dict[int, set[Key]] = {}
        self._keep_ms = keep_minutes * 60_000

    def add(self, key: Key) -> None:
        self._by_minute.setdefault(key[3] // 60_000, set()).add(key)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 4:
            return False
        return key in self._by_minute.get(key[3] // 60_000, ())

    def prune(self, now_ms: int) -> None:
        oldest = (now_ms - self._keep_ms) // 60_000
        for minute in [m for m in self._by_minute if m < oldest]:
            del self._by_minute[minute]

    def clear(self) -> None:
        self._by_minute.clear()
