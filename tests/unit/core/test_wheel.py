"""The timing wheel against a sorted-list oracle (hypothesis stateful), plus its edge cases."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tickwheel.core.wheel import TimingWheel


class WheelVersusSortedList(RuleBasedStateMachine):
    """Small wheels (4-8 slots, 1-3 levels, coarse ticks too) so cascades and overflow happen constantly."""

    def __init__(self) -> None:
        super().__init__()
        self.wheel: TimingWheel[int, int] | None = None
        self.pending: dict[int, tuple[int, int]] = {}  # key -> (due_ms, insertion seq)
        self.now = 0
        self.seq = 0

    @precondition(lambda self: self.wheel is None)
    @rule(
        tick=st.sampled_from([1, 1, 3, 10]),
        size=st.sampled_from([4, 8, 64]),
        levels=st.integers(1, 3),
        start=st.integers(0, 10**6),
    )
    def build(self, tick: int, size: int, levels: int, start: int) -> None:
        self.wheel = TimingWheel(tick_ms=tick, wheel_size=size, levels=levels, start_ms=start)
        self.now = start

    @precondition(lambda self: self.wheel is not None)
    @rule(key=st.integers(0, 30), offset=st.integers(-50, 5000) | st.integers(5000, 300_000))
    def insert(self, key: int, offset: int) -> None:
        assert self.wheel is not None
        added = self.wheel.insert(key, self.now + offset, self.seq)
        assert added == (key not in self.pending)
        if added:
            self.pending[key] = (self.now + offset, self.seq)
        self.seq += 1

    @precondition(lambda self: self.wheel is not None)
    @rule(key=st.integers(0, 30))
    def cancel(self, key: int) -> None:
        assert self.wheel is not None
        assert self.wheel.cancel(key) == (key in self.pending)
        self.pending.pop(key, None)

    @precondition(lambda self: self.wheel is not None)
    @rule(step=st.integers(-5, 40) | st.integers(40, 20_000))
    def advance(self, step: int) -> None:
        assert self.wheel is not None
        self.now = max(self.now, self.now + step)
        due = sorted((d, s, k) for k, (d, s) in self.pending.items() if d <= self.now)
        assert self.wheel.advance(self.now) == [(d, k, s) for d, s, k in due]
        for _, _, key in due:
            del self.pending[key]

    @invariant()
    def agrees(self) -> None:
        if self.wheel is None:
            return
        assert len(self.wheel) == len(self.pending)
        assert all(key in self.wheel for key in self.pending)
        expected = min((d for d, _ in self.pending.values()), default=None)
        assert self.wheel.next_due_ms() == expected


TestWheelVersusSortedList = WheelVersusSortedList.TestCase
TestWheelVersusSortedList.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_the_same_run_inserted_twice_is_kept_once() -> None:
    wheel: TimingWheel[str, str] = TimingWheel(start_ms=1000)
    assert wheel.insert("run-1", 1500, "a")
    assert not wheel.insert("run-1", 1200, "b")
    assert wheel.advance(2000) == [(1500, "run-1", "a")]


def test_past_entries_come_out_first_on_the_next_advance() -> None:
    wheel: TimingWheel[str, int] = TimingWheel(start_ms=10_000)
    wheel.insert("late", 9_000, 1)
    wheel.insert("later", 9_500, 2)
    wheel.insert("soon", 10_001, 3)
    assert wheel.next_due_ms() == 9_000
    assert wheel.advance(10_000) == [(9_000, "late", 1), (9_500, "later", 2)]
    assert wheel.advance(10_001) == [(10_001, "soon", 3)]


def test_far_entries_wait_in_overflow_and_fire_exactly() -> None:
    wheel: TimingWheel[str, None] = TimingWheel(wheel_size=8, levels=2, start_ms=0)  # span 64 ms
    wheel.insert("far", 1_000_003, None)
    wheel.insert("near", 10, None)
    assert wheel.next_due_ms() == 10
    assert wheel.advance(999_999) == [(10, "near", None)]
    assert wheel.next_due_ms() == 1_000_003
    assert wheel.advance(1_000_002) == []
    assert wheel.advance(1_000_003) == [(1_000_003, "far", None)]
    assert len(wheel) == 0 and wheel.next_due_ms() is None


def test_ties_come_out_in_insertion_order_across_levels() -> None:
    wheel: TimingWheel[int, None] = TimingWheel(wheel_size=4, levels=2, start_ms=0)
    wheel.insert(1, 100, None)  # inserted first, far away: overflow
    wheel.advance(90)
    wheel.insert(2, 100, None)  # inserted later, close: level 0
    assert [key for _, key, _ in wheel.advance(100)] == [1, 2]


def test_an_idle_jump_of_a_day_is_cheap_and_exact() -> None:
    wheel: TimingWheel[int, None] = TimingWheel(start_ms=0)
    for key in range(1000):
        wheel.insert(key, key * 86_400, None)
    fired = wheel.advance(86_400_000)
    assert [due for due, _, _ in fired] == [key * 86_400 for key in range(1000)]


def test_bad_shapes_are_rejected() -> None:
    with pytest.raises(ValueError, match="power of two"):
        TimingWheel(wheel_size=100)
