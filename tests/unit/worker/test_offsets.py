"""Offsets are committed only below the oldest message still in flight."""

from __future__ import annotations

from worker.offsets import OffsetTracker


def test_the_commit_stops_at_the_oldest_message_in_flight() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.started("lane", 0, offset)
    tracker.finished("lane", 0, 11)
    tracker.finished("lane", 0, 12)
    assert tracker.committable() == [("lane", 0, 10)]
    tracker.committed([("lane", 0, 10)])
    assert tracker.committable() == []
    tracker.finished("lane", 0, 10)
    assert tracker.committable() == [("lane", 0, 13)]


def test_partitions_are_tracked_apart_and_a_forgotten_partition_is_not_committed() -> None:
    tracker = OffsetTracker()
    tracker.started("lane", 0, 5)
    tracker.started("lane", 1, 7)
    tracker.finished("lane", 1, 7)
    assert sorted(tracker.committable()) == [("lane", 0, 5), ("lane", 1, 8)]
    tracker.forget("lane", 0)
    assert tracker.committable() == [("lane", 1, 8)]
    assert tracker.inflight() == 0
