"""Fair share between tenants: deficit round robin (DRR) over per-tenant queues, weighted.

Each time a tenant's turn comes it earns `quantum * weight` credits and is served one item per credit until its
credit or its queue runs out; a tenant whose queue empties loses its remaining credit (DRR's rule, so an idle
tenant cannot hoard). With weights wA and wB and both backlogged, A gets wA / (wA + wB) of the items served;
a tenant that arrives with a few items waits at most one round, however long the other tenants' queues are.
Pure: no clock, no I/O; the worker uses `FairQueue` over the messages it has consumed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class FairQueue(Generic[K, T]):
    """Items queued per key (a tenant), taken in weighted round robin."""

    def __init__(self, weight_of: Callable[[K], int], quantum: int = 1) -> None:
        self._weight_of = weight_of
        self._quantum = quantum
        self._queues: dict[K, deque[T]] = {}
        self._active: deque[K] = deque()  # keys with queued items, in turn order; the head is being served
        self._credit: dict[K, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, key: K, item: T) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        if not queue:
            self._active.append(key)
            self._credit[key] = 0
        queue.append(item)
        self._size += 1

    def pop(self) -> tuple[K, T] | None:
        """The next item in fair order, with its key; None when empty."""
        while self._active:
            key = self._active[0]
            if self._credit[key] <= 0:
                self._credit[key] += self._quantum * max(1, self._weight_of(key))
            queue = self._queues[key]
            item = queue.popleft()
            self._size -= 1
            self._credit[key] -= 1
            if not queue:
                self._active.popleft()
                del self._queues[key], self._credit[key]
            elif self._credit[key] <= 0:
                self._active.rotate(-1)
            return key, item
        return None

    def backlog(self, key: K) -> int:
        """How many items `key` has queued."""
        queue = self._queues.get(key)
        return len(queue) if queue else 0


def interleave(items: Iterable[T], key_of: Callable[[T], K], weight_of: Callable[[K], int]) -> list[T]:
    """`items` in fair order between their keys (each key's own items keep their order)."""
    queue: FairQueue[K, T] = FairQueue(weight_of)
    for item in items:
        queue.push(key_of(item), item)
    ordered: list[T] = []
    while (taken := queue.pop()) is not None:
        ordered.append(taken[1])
    return ordered
