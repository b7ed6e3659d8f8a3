"""Group commit (tickwheel.store.grouping): a batch leaves at once when none of its kind is in flight; the batches
that arrive while one is being acknowledged go out together next, as few batches as the limits allow; each caller
sees its own group's outcome, and a logged caller's rows are never split across batches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tickwheel.errors import Unavailable
from tickwheel.store.grouping import GroupedBatches, Rows, estimated_bytes, groups_of, leaves_at_once


def rows_of(name: str, count: int = 6, size: int = 10) -> list[tuple[str, list[Any]]]:
    return [(f"INSERT {name} {i}", ["x" * size]) for i in range(count)]


class Refused(Exception):
    """What the driver raises for a statement the server refuses for its content (no `retriable`)."""


class Recorder:
    """A store's `batch`: records what it was sent; fails batches holding a row named in `failing` (unavailable)
    or in `refused` (refused for its content)."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[str], bool]] = []
        self.failing: set[str] = set()
        self.refused: set[str] = set()

    async def __call__(self, rows: Rows, logged: bool) -> None:
        await asyncio.sleep(0)
        names = [cql for cql, _ in rows]
        self.sent.append((names, logged))
        if any(name.split()[1] in self.failing for name in names):
            raise Unavailable("batch timed out (injected)")
        if any(name.split()[1] in self.refused for name in names):
            raise Refused("Batch too large (injected)")


def test_entries_are_cut_into_groups_under_both_limits_in_order() -> None:
    assert groups_of([(6, 100)] * 5, max_rows=12, max_bytes=10_000) == [[0, 1], [2, 3], [4]]
    assert groups_of([(6, 100)] * 5, max_rows=100, max_bytes=250) == [[0, 1], [2, 3], [4]]
    assert groups_of([], max_rows=12, max_bytes=100) == []


def test_an_entry_above_a_limit_is_a_group_of_its_own() -> None:
    assert groups_of([(6, 10), (6, 999), (6, 10)], max_rows=12, max_bytes=100) == [[0], [1], [2]]
    assert groups_of([(20, 10), (1, 10)], max_rows=12, max_bytes=100) == [[0], [1]]


def test_the_size_estimate_counts_every_value_and_the_length_of_text() -> None:
    assert estimated_bytes([("INSERT", ["abcd", b"ef", 7, None, {"k=v", "a=b"}])]) == 5 * 16 + 4 + 2 + 6


class Held:
    """A store's `batch` whose batches are acknowledged only when the test says so (`ack`)."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[str], bool]] = []
        self._acks: list[asyncio.Future[None]] = []

    async def __call__(self, rows: Rows, logged: bool) -> None:
        self.sent.append(([cql for cql, _ in rows], logged))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks.append(ack)
        await ack

    def ack(self, index: int) -> None:
        self._acks[index].set_result(None)


def callers_in(names: list[str]) -> list[str]:
    """The callers whose rows a batch carries, in order."""
    return list(dict.fromkeys(name.split()[1] for name in names))


async def rounds(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)

async def second_in_flight_behind_first(grouped: GroupedBatches, send: Held) -> tuple[asyncio.Future[None], ...]:
    """job0's batch sent and acknowledged, job1's (queued behind it) sent as the group that followed."""
    first = asyncio.ensure_future(grouped.write(rows_of("job0")))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(grouped.write(rows_of("job1")))
    await rounds()
    send.ack(0)
    await rounds()
    return first, second



def test_a_batch_leaves_at_once_only_below_the_threshold_in_flight_and_with_nobody_queued_before_it() -> None:
    assert leaves_at_once(in_flight=0, queued=0, below=1)
    assert not leaves_at_once(in_flight=1, queued=0, below=1)
    assert not leaves_at_once(in_flight=0, queued=1, below=1)
    assert leaves_at_once(in_flight=3, queued=0) and not leaves_at_once(in_flight=4, queued=0)  # the default: 4
    assert leaves_at_once(in_flight=1, queued=0, below=2)
    assert not leaves_at_once(in_flight=2, queued=0, below=2)


async def test_a_lone_batch_is_sent_in_the_callers_own_step_without_waiting_for_the_loop_round() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=1)
    writing = asyncio.ensure_future(grouped.write(rows_of("alone")))
    await asyncio.sleep(0)  # the caller's first step only
    assert [callers_in(names) for names, _ in send.sent] == [["alone"]]
    send.ack(0)
    await writing


async def test_batches_arriving_while_one_is_in_flight_leave_together_when_it_is_acknowledged() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=1)
    first = asyncio.ensure_future(grouped.write(rows_of("job0")))
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(grouped.write(rows_of(f"job{i}"))) for i in range(1, 5)]
    await rounds()
    assert len(send.sent) == 1  # nothing more leaves while job0's batch is in flight
    send.ack(0)
    await rounds()
    assert first.done() and not any(task.done() for task in later)  # each answered on its own batch's ack
    assert [callers_in(names) for names, _ in send.sent] == [["job0"], ["job1", "job2", "job3", "job4"]]
    send.ack(1)
    await asyncio.gather(*later)
    grouped_names, logged = send.sent[1]
    assert logged and grouped_names[:6] == [cql for cql, _ in rows_of("job1")]  # each caller's rows together


async def test_the_group_queued_behind_a_group_leaves_in_the_same_step_as_that_ones_acknowledgement() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=1)
    first, second = await second_in_flight_behind_first(grouped, send)  # job1's group from a task of its own
    third = asyncio.ensure_future(grouped.write(rows_of("job2")))
    await rounds()
    send.ack(1)
    await asyncio.sleep(0)  # one step: job1's group task answers job1 and sends job2's group itself
    assert [callers_in(names) for names, _ in send.sent] == [["job0"], ["job1"], ["job2"]]
    send.ack(2)
    await asyncio.gather(first, second, third)


async def test_batches_leave_at_once_up_to_the_threshold_in_flight_and_queue_past_it() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=2)
    writes = [asyncio.ensure_future(grouped.write(rows_of(f"job{i}"))) for i in range(4)]
    await rounds()
    assert [callers_in(names) for names, _ in send.sent] == [["job0"], ["job1"]]  # job2 and job3 queued
    send.ack(1)
    await rounds()
    assert [callers_in(names) for names, _ in send.sent] == [["job0"], ["job1"], ["job2", "job3"]]
    send.ack(0)
    send.ack(2)
    await asyncio.gather(*writes)


async def test_once_everything_is_acknowledged_the_next_batch_leaves_at_once_again() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=1)
    first, second = await second_in_flight_behind_first(grouped, send)
    send.ack(1)
    await asyncio.gather(first, second)
    third = asyncio.ensure_future(grouped.write(rows_of("job2")))
    await asyncio.sleep(0)
    assert [callers_in(names) for names, _ in send.sent] == [["job0"], ["job1"], ["job2"]]
    send.ack(2)
    await third


async def test_a_batch_in_flight_holds_back_only_batches_of_its_own_kind() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=1)
    logged = asyncio.ensure_future(grouped.write(rows_of("logged")))
    await asyncio.sleep(0)
    unlogged = asyncio.ensure_future(grouped.write(rows_of("unlogged"), logged=False))
    await asyncio.sleep(0)
    assert [(callers_in(names), kind) for names, kind in send.sent] == [(["logged"], True), (["unlogged"], False)]
    send.ack(0)
    send.ack(1)
    await asyncio.gather(logged, unlogged)


async def test_the_writes_queued_behind_a_batch_go_out_as_one_batch_and_every_caller_returns() -> None:
    send = Recorder()
    grouped = GroupedBatches(send, at_once_below=1)
    await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(5)))
    assert [len(names) for names, _ in send.sent] == [6, 24]  # the first alone, the four behind it together


async def test_logged_and_unlogged_writes_are_never_mixed_in_one_batch() -> None:
    send = Recorder()
    grouped = GroupedBatches(send, at_once_below=1)
    await asyncio.gather(grouped.write(rows_of("a")), grouped.write(rows_of("b"), logged=False))
    assert sorted(logged for _, logged in send.sent) == [False, True]


async def test_a_failed_group_fails_its_callers_only() -> None:
    send = Recorder()
    send.failing = {"job1"}
    grouped = GroupedBatches(send, max_rows=12, at_once_below=1)  # job0 alone, then (job1, job2), (job3)
    results = await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(4)), return_exceptions=True)
    assert [isinstance(r, Unavailable) for r in results] == [False, True, True, False]
    assert len(send.sent) == 3


async def test_a_group_refused_for_its_content_is_sent_again_caller_by_caller_and_only_the_culprit_fails() -> None:
    send = Recorder()
    send.refused = {"job2"}
    grouped = GroupedBatches(send, at_once_below=1)  # job0 alone, (job1, job2, job3) refused, then each alone
    results = await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(4)), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["NoneType", "NoneType", "Refused", "NoneType"]
    assert [len(names) for names, _ in send.sent] == [6, 18, 6, 6, 6]


async def test_a_callers_rows_are_never_split_across_batches() -> None:
    send = Recorder()
    grouped = GroupedBatches(send, max_rows=10, at_once_below=1)
    await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(4)))
    assert len(send.sent) == 4
    for names, _ in send.sent:
        assert len({name.split()[1] for name in names}) * 6 == len(names)


async def test_writes_of_later_rounds_go_in_later_batches() -> None:
    send = Recorder()
    grouped = GroupedBatches(send, at_once_below=1)
    await grouped.write(rows_of("first"))
    await grouped.write(rows_of("second"))
    assert len(send.sent) == 2


async def test_a_cancelled_caller_does_not_fail_the_others_of_its_group() -> None:
    send = Recorder()
    grouped = GroupedBatches(send, at_once_below=1)
    first = asyncio.ensure_future(grouped.write(rows_of("first")))
    gone = asyncio.ensure_future(grouped.write(rows_of("gone")))
    stays = asyncio.ensure_future(grouped.write(rows_of("stays")))
    await asyncio.sleep(0)  # first in flight, gone and stays queued behind it
    gone.cancel()
    await asyncio.gather(first, stays)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert [callers_in(names) for names, _ in send.sent] == [["first"], ["gone", "stays"]]  # as before: not waited for


async def test_a_lone_caller_cancelled_in_flight_lets_the_queued_ones_leave() -> None:
    send = Held()
    grouped = GroupedBatches(send, at_once_below=1)
    gone = asyncio.ensure_future(grouped.write(rows_of("gone")))
    await asyncio.sleep(0)
    stays = asyncio.ensure_future(grouped.write(rows_of("stays")))
    await asyncio.sleep(0)
    gone.cancel()
    await rounds()
    assert [callers_in(names) for names, _ in send.sent] == [["gone"], ["stays"]]
    send.ack(1)
    await stays
    with pytest.raises(asyncio.CancelledError):
        await gone
