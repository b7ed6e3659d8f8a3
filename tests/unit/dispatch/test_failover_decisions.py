"""Failover decisions: the coordinator evicts a dispatcher only after consecutive refusals (timeouts prove
nothing); a new owner resumes a handed-over shard with seconds of grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from coordinator.liveness import Strikes
from dispatcher.ownership import HANDOVER_GRACE_S, LEAVING_TAG, owner_tag, resume_from


def test_two_refusals_in_a_row_evict() -> None:
    strikes = Strikes(needed=2)
    assert not strikes.observe("m-a", True)
    assert strikes.observe("m-a", True)


def test_an_answer_resets_and_a_timeout_counts_nothing() -> None:
    strikes = Strikes(needed=2)
    assert not strikes.observe("m-a", True)
    assert not strikes.observe("m-a", False)
    assert not strikes.observe("m-a", True)
    assert not strikes.observe("m-a", None)
    assert not strikes.observe("m-a", None)
    assert strikes.observe("m-a", True)


def test_members_that_left_are_forgotten() -> None:
    strikes = Strikes(needed=2)
    strikes.observe("m-a", True)
    strikes.keep_only({"m-b"})
    assert not strikes.observe("m-a", True)


def test_a_mark_left_by_a_handover_is_resumed_with_seconds_of_grace_not_minutes() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    mark = now - timedelta(seconds=1)
    assert resume_from(mark, now, 120) == mark - timedelta(seconds=120)  # a crash: re-fire two minutes
    assert resume_from(mark, now, 120, handed_over=True) == mark - timedelta(seconds=HANDOVER_GRACE_S)
    assert owner_tag("m-1", leaving=True).endswith(LEAVING_TAG) and owner_tag("m-1", leaving=False) == "m-1"
