"""Failover decisions: a new owner resumes a handed-over shard with seconds of grace (the coordinator's eviction
decisions: tests/unit/core/test_liveness.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dispatcher.ownership import HANDOVER_GRACE_S, LEAVING_TAG, owner_tag, resume_from


def test_a_mark_left_by_a_handover_is_resumed_with_seconds_of_grace_not_minutes() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    mark = now - timedelta(seconds=1)
    assert resume_from(mark, now, 120) == mark - timedelta(seconds=120)  # a crash: re-fire two minutes
    assert resume_from(mark, now, 120, handed_over=True) == mark - timedelta(seconds=HANDOVER_GRACE_S)
    assert owner_tag("m-1", leaving=True).endswith(LEAVING_TAG) and owner_tag("m-1", leaving=False) == "m-1"
