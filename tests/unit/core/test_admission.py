"""The pure admission decisions: slots, the CoDel wait limit, loop-lag shedding and Retry-After."""

from __future__ import annotations

import pytest

from tickwheel.core.admission import (
    AdmissionPolicy,
    Delay,
    Load,
    ShedReason,
    Verdict,
    decide,
    observe,
    retry_after_s,
    standing,
    wait_limit_s,
)

POLICY = AdmissionPolicy(max_in_flight=4, max_waiting=2, wait_max_s=0.5, wait_target_s=0.05, interval_s=1.0)
CALM = Delay()


def load(in_flight: int, waiting: int = 0, queue: Delay = CALM, lag: Delay = CALM) -> Load:
    return Load(in_flight, waiting, queue, lag)


def test_a_request_is_admitted_while_a_slot_is_free_and_nobody_waits() -> None:
    assert decide(POLICY, load(3), 10.0) == (Verdict.ADMIT, None)


def test_with_every_slot_taken_a_request_waits_until_the_queue_is_full_then_is_shed_at_once() -> None:
    assert decide(POLICY, load(4, 0), 10.0) == (Verdict.WAIT, None)
    assert decide(POLICY, load(4, 1), 10.0) == (Verdict.WAIT, None)
    assert decide(POLICY, load(4, 2), 10.0) == (Verdict.SHED, ShedReason.QUEUE_FULL)


def test_a_free_slot_does_not_let_a_newcomer_pass_those_already_waiting() -> None:
    assert decide(POLICY, load(3, 1), 10.0) == (Verdict.WAIT, None)


def test_a_delay_stands_only_after_a_whole_interval_of_samples_at_or_above_the_target() -> None:
    delay = observe(CALM, 0.2, 0.05, now_s=10.0)
    delay = observe(delay, 0.05, 0.05, now_s=10.6)
    assert delay == Delay(10.0) and not standing(delay, 1.0, 10.9)
    delay = observe(delay, 0.3, 0.05, now_s=11.0)
    assert standing(delay, 1.0, 11.0)


def test_one_sample_below_the_target_ends_a_standing_delay() -> None:
    delay = observe(Delay(5.0), 0.0, 0.05, now_s=11.0)
    assert delay == CALM and not standing(delay, 1.0, 30.0)


def test_a_burst_may_wait_long_but_a_standing_queue_only_the_target() -> None:
    assert wait_limit_s(POLICY, Delay(10.0), 10.5) == 0.5  # above the target for half an interval: a burst
    assert wait_limit_s(POLICY, Delay(10.0), 11.0) == 0.05


def test_a_standing_loop_lag_sheds_every_request_even_with_slots_free() -> None:
    assert decide(POLICY, load(0, lag=Delay(10.0)), 11.0) == (Verdict.SHED, ShedReason.LOOP_LAG)
    assert decide(POLICY, load(0, lag=Delay(10.0)), 10.9) == (Verdict.ADMIT, None)


def test_a_lag_target_of_zero_sheds_nothing_for_lag() -> None:
    policy = AdmissionPolicy(lag_target_s=0.0)
    assert decide(policy, load(0, lag=Delay(0.0)), 100.0) == (Verdict.ADMIT, None)


@pytest.mark.parametrize(
    ("base", "fraction", "expected"), [(1.0, 0.0, 1), (1.0, 0.49, 1), (1.0, 0.5, 2), (0.2, 0.9, 2), (1.5, 0.0, 2)]
)
def test_retry_after_is_whole_seconds_one_or_one_more_at_random(base: float, fraction: float, expected: int) -> None:
    assert retry_after_s(AdmissionPolicy(retry_after_s=base), fraction) == expected
