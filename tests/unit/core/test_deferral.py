"""Deferral is bounded: flow control may hold a run back without spending an attempt, but not past its max age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwheel.core.retry import MAX_DEFERRAL_AGE_S, RetryPolicy, deferral_dead_reason

DUE = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_deferral_inside_the_max_age_is_allowed():
    assert deferral_dead_reason(RetryPolicy(max_age_s=60), DUE, DUE + timedelta(seconds=60)) is None


def test_a_deferral_past_the_max_age_is_dead_with_a_reason():
    reason = deferral_dead_reason(RetryPolicy(max_age_s=60), DUE, DUE + timedelta(seconds=61))
    assert reason is not None and "max_age_s 60" in reason


def test_without_a_max_age_deferral_is_still_bounded():
    unbounded = RetryPolicy(max_age_s=None)
    assert deferral_dead_reason(unbounded, DUE, DUE + timedelta(seconds=MAX_DEFERRAL_AGE_S)) is None
    assert deferral_dead_reason(unbounded, DUE, DUE + timedelta(seconds=MAX_DEFERRAL_AGE_S + 1)) is not None
