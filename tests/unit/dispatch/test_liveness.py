"""The coordinator evicts a dispatcher only after consecutive refusals; timeouts prove nothing."""

from __future__ import annotations

from coordinator.liveness import Strikes


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
