"""Which Kafka offsets a consumer may commit while many messages of a partition are in flight at once.

A committed offset says "everything below was handled". Messages finish out of order, so the offset committed
for a partition is the oldest one still in flight (or one past the newest seen when none is): a worker that dies
is handed back exactly what it had not finished, and nothing it had.
"""

from __future__ import annotations

from collections import defaultdict

TopicPartition = tuple[str, int]


class OffsetTracker:
    """Offsets started and finished per partition; `committable()` says what to commit now."""

    def __init__(self) -> None:
        self._inflight: dict[TopicPartition, set[int]] = defaultdict(set)
        self._next: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    def started(self, topic: str, partition: int, offset: int) -> None:
        tp = (topic, partition)
        self._inflight[tp].add(offset)
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def finished(self, topic: str, partition: int, offset: int) -> None:
        self._inflight[(topic, partition)].discard(offset)

    def inflight(self) -> int:
        return sum(len(offsets) for offsets in self._inflight.values())

    def committable(self) -> list[tuple[str, int, int]]:
        """(topic, partition, next offset to read) for each partition whose safe offset moved."""
        moved = []
        for tp, next_offset in self._next.items():
            pending = self._inflight.get(tp)
            safe = min(pending) if pending else next_offset
            if self._committed.get(tp) != safe:
                moved.append((tp[0], tp[1], safe))
        return moved

    def committed(self, offsets: list[tuple[str, int, int]]) -> None:
        """Remember what the broker accepted, so it is not committed again."""
        for topic, partition, offset in offsets:
            self._committed[(topic, partition)] = offset

    def forget(self, topic: str, partition: int) -> None:
        """A partition was taken away: its offsets are another consumer's now."""
        tp = (topic, partition)
        for table in (self._inflight, self._next, self._committed):
            table.pop(tp, None)
