"""The attempt as fencing token: what both stores decide with after (or instead of) a conditional write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwheel.core import fencing
from tickwheel.store.records import RunStatus

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_only_the_attempt_the_run_is_running_at_holds_it() -> None:
    assert fencing.holds(RunStatus.RUNNING, 2, 2)
    assert not fencing.holds(RunStatus.RUNNING, 3, 2)  # a later claim took it
    assert not fencing.holds(RunStatus.RETRY, 2, 2)
    assert not fencing.holds(None, None, 1)  # no such run


def test_a_refused_outcome_counts_only_when_it_is_this_attempts_own_earlier_write() -> None:
    assert fencing.outcome_counts(True, None, None, RunStatus.SUCCEEDED, 1)
    assert fencing.outcome_counts(False, RunStatus.SUCCEEDED, 1, RunStatus.SUCCEEDED, 1)  # its reply was lost
    assert not fencing.outcome_counts(False, RunStatus.SUCCEEDED, 1, RunStatus.DEAD, 1)
    assert not fencing.outcome_counts(False, RunStatus.RUNNING, 2, RunStatus.SUCCEEDED, 1)  # a stale worker


def test_a_lease_check_is_worth_a_worker_only_past_the_lease_or_once_reported() -> None:
    def lapsed(lease_until: datetime | None, reported: bool = False) -> bool:
        return fencing.lease_lapsed(RunStatus.RUNNING, 1, 1, reported=reported, lease_until=lease_until, now=NOW)

    assert lapsed(NOW)
    assert lapsed(None)
    assert not lapsed(NOW + timedelta(seconds=1))
    assert lapsed(NOW + timedelta(hours=1), reported=True)
    assert not fencing.lease_lapsed(RunStatus.RUNNING, 2, 1, reported=True, lease_until=None, now=NOW)


def test_a_lease_write_refused_by_its_lease_condition_is_kept_while_the_attempt_holds() -> None:
    assert fencing.lease_kept(False, RunStatus.RUNNING, 1, 1)
    assert not fencing.lease_kept(False, RunStatus.SUCCEEDED, 1, 1)
    assert fencing.lease_kept(True, None, None, 1)
