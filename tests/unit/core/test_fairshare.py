"""Deficit round robin between tenants: weights are honoured, a small tenant never waits behind a big backlog."""

from __future__ import annotations

from collections import Counter

from tickwheel.core.fairshare import FairQueue, interleave


def test_a_small_tenant_is_served_within_one_round_of_a_huge_backlog() -> None:
    queue: FairQueue[str, int] = FairQueue(lambda _: 1)
    for n in range(20_000):
        queue.push("A", n)
    for n in range(50):
        queue.push("B", n)
    order = [queue.pop() for _ in range(100)]
    assert [taken[0] for taken in order if taken] == ["A", "B"] * 50
    assert queue.backlog("B") == 0 and queue.backlog("A") == 20_000 - 50 and len(queue) == 20_000 - 50


def test_backlogged_tenants_share_in_proportion_to_their_weights() -> None:
    weights = {"A": 3, "B": 1, "C": 0}  # a weight below 1 counts as 1
    queue: FairQueue[str, int] = FairQueue(weights.__getitem__)
    for key in weights:
        for n in range(1000):
            queue.push(key, n)
    served = Counter(queue.pop()[0] for _ in range(500))  # type: ignore[index]
    assert served == {"A": 300, "B": 100, "C": 100}


def test_each_tenants_items_keep_their_order_and_nothing_is_lost() -> None:
    items = [("A", n) for n in range(7)] + [("B", n) for n in range(3)] + [("A", 7)]
    ordered = interleave(items, lambda item: item[0], lambda _: 2)
    assert sorted(ordered) == sorted(items)
    assert [n for k, n in ordered if k == "A"] == list(range(8))
    assert ordered[:4] == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]


def test_an_idle_tenant_does_not_hoard_credit() -> None:
    queue: FairQueue[str, int] = FairQueue(lambda k: 10 if k == "B" else 1)
    queue.push("B", 0)
    assert queue.pop() == ("B", 0)
    for n in range(5):
        queue.push("A", n)
    queue.push("B", 1)
    assert [queue.pop() for _ in range(3)] == [("A", 0), ("B", 1), ("A", 1)]
    assert queue.pop() == ("A", 2) and len(queue) == 2
