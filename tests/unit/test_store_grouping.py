"""Group commit (tickwheel.store.grouping): the batches of one event-loop round go out as few batches as the limits
allow, each caller sees its own group's outcome, and a logged caller's rows are never split across batches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tickwheel.errors import Unavailable
from tickwheel.store.grouping import GroupedBatches, Rows, estimated_bytes, groups_of


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


async def test_the_writes_of_one_round_go_out_as_one_batch_and_every_caller_returns() -> None:
    send = Recorder()
    grouped = GroupedBatches(send)
    await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(5)))
    assert len(send.sent) == 1
    names, logged = send.sent[0]
    assert logged and len(names) == 30
    assert names[:6] == [cql for cql, _ in rows_of("job0")]  # each caller's rows together, in order


async def test_logged_and_unlogged_writes_are_never_mixed_in_one_batch() -> None:
    send = Recorder()
    grouped = GroupedBatches(send)
    await asyncio.gather(grouped.write(rows_of("a")), grouped.write(rows_of("b"), logged=False))
    assert sorted(logged for _, logged in send.sent) == [False, True]


async def test_a_failed_group_fails_its_callers_only() -> None:
    send = Recorder()
    send.failing = {"job1"}
    grouped = GroupedBatches(send, max_rows=12)  # two creates a batch: (job0, job1), (job2, job3)
    results = await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(4)), return_exceptions=True)
    assert [isinstance(r, Unavailable) for r in results] == [True, True, False, False]
    assert len(send.sent) == 2


async def test_a_group_refused_for_its_content_is_sent_again_caller_by_caller_and_only_the_culprit_fails() -> None:
    send = Recorder()
    send.refused = {"job1"}
    grouped = GroupedBatches(send)
    results = await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(3)), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["NoneType", "Refused", "NoneType"]
    assert [len(names) for names, _ in send.sent] == [18, 6, 6, 6]


async def test_a_callers_rows_are_never_split_across_batches() -> None:
    send = Recorder()
    grouped = GroupedBatches(send, max_rows=10)
    await asyncio.gather(*(grouped.write(rows_of(f"job{i}")) for i in range(3)))
    for names, _ in send.sent:
        assert len({name.split()[1] for name in names}) * 6 == len(names)


async def test_writes_of_later_rounds_go_in_later_batches() -> None:
    send = Recorder()
    grouped = GroupedBatches(send)
    await grouped.write(rows_of("first"))
    await grouped.write(rows_of("second"))
    assert len(send.sent) == 2


async def test_a_cancelled_caller_does_not_fail_the_others_of_its_group() -> None:
    send = Recorder()
    grouped = GroupedBatches(send)
    gone = asyncio.ensure_future(grouped.write(rows_of("gone")))
    stays = asyncio.ensure_future(grouped.write(rows_of("stays")))
    await asyncio.sleep(0)
    gone.cancel()
    await stays
    with pytest.raises(asyncio.CancelledError):
        await gone
