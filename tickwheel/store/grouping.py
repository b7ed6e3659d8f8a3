"""Group commit: batches that many requests write while an earlier one is being acknowledged go to Cassandra as few.

A create writes its job's rows in one batch (logged without an Idempotency-Key: all or none; unlogged after the
keyed create's LWT). At hundreds of creates a second, most of the cost of such a batch is per request, not per
row: the driver's request and callback, a frame each way, and for a logged batch the coordinator's batchlog
write and delete. `GroupedBatches.write` is a group commit that waits only under load: a caller's batch leaves at
once while fewer than `SENT_AT_ONCE_BELOW` batches of its kind are in flight (nothing worth waiting for:
grouping would only add latency); past that, callers queue, and when a batch of their kind is acknowledged
everything queued leaves as few batches as the size limits allow, each caller then seeing its own group's
outcome. Under light load a create costs no wait; under load the groups grow by themselves to what arrived
during one acknowledgement (the pure decision: `leaves_at_once`).

What a caller may rely on is unchanged: its rows are written by exactly one batch of the kind it asked for,
so a logged write is still all or none for its rows (and for the other callers' rows of the same group, which is
harmless: each of them would have written them anyway), and its call returns only once that batch is acknowledged
at the store's consistency. A group the cluster did not take (unavailable, timed out) fails every caller in it,
each of which answers as it would for its own failed batch (a retriable 503); a group refused for what it holds
(a batch too large, a bad value) is sent again as one batch per caller, so only the culprit fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

Rows = Sequence[tuple[str, Sequence[Any]]]

GROUP_ROWS = 120  # statements per batch: 20 creates of 6 rows
# Estimated bytes of values per batch: well under Cassandra's batch_size_fail_threshold (50 KiB by default), which
# refuses a whole multi-partition batch above it. The estimate counts text and blobs by length and every other
# value as 16 bytes; the server's count adds some overhead per cell, hence the margin.
GROUP_BYTES = 24 * 1024
BATCHES_IN_FLIGHT = 16  # grouped batches sent at once; more callers wait for the next free one
# A batch leaves at once while fewer than this many of its kind are in flight. 1 is the textbook group commit, and
# it cost single creates a quarter of their rate (BENCHMARKS.md, "Create path: group commit only under load"): with
# one group in flight at a time, a create waits for a whole acknowledgement, loop rounds included. A few in flight
# (PostgreSQL's commit_siblings is 5) keep light load unwaited and still group the hundreds of a batch request.
SENT_AT_ONCE_BELOW = 4


def leaves_at_once(in_flight: int, queued: int, below: int = SENT_AT_ONCE_BELOW) -> bool:
    """Whether a caller's batch is sent now rather than queued for the group that leaves on the next
    acknowledgement: only when nobody is queued before it (callers leave in order) and fewer than `below`
    batches of its kind are in flight (with none in flight there is no acknowledgement to wait for)."""
    return queued == 0 and in_flight < below


def estimated_bytes(rows: Rows) -> int:
    """A rough, generous size of `rows` (what Cassandra's batch size limits count): 16 bytes a value (a fixed-size
    value, or a cell's overhead), plus the length of text, blobs and the text in collections."""
    size = 0
    for _, params in rows:
        size += 16 * len(params)
        for value in params:
            kind = type(value)
            if kind is str or kind is bytes:
                size += len(value)
            elif kind is set or kind is frozenset or kind is list or kind is tuple:
                size += sum(len(v) if isinstance(v, str | bytes) else 16 for v in value)
    return size


def groups_of(sizes: Sequence[tuple[int, int]], max_rows: int, max_bytes: int) -> list[list[int]]:
    """Indexes of the entries (rows, bytes) in order, cut into groups of at most `max_rows` rows and `max_bytes`
    bytes; an entry above either limit alone is a group of its own (it is sent as it would be without grouping)."""
    groups: list[list[int]] = []
    current: list[int] = []
    rows = size = 0
    for index, (entry_rows, entry_bytes) in enumerate(sizes):
        if current and (rows + entry_rows > max_rows or size + entry_bytes > max_bytes):
            groups.append(current)
            current, rows, size = [], 0, 0
        current.append(index)
        rows += entry_rows
        size += entry_bytes
    if current:
        groups.append(current)
    return groups


Queued = tuple[Rows, int, "asyncio.Future[None]"]


class GroupedBatches:
    """Batches of many callers written together (see the module's docstring). `send(rows, logged)` writes one
    batch: the store's `batch`."""

    def __init__(
        self,
        send: Callable[[Rows, bool], Awaitable[None]],
        *,
        max_rows: int = GROUP_ROWS,
        max_bytes: int = GROUP_BYTES,
        in_flight: int = BATCHES_IN_FLIGHT,
        at_once_below: int = SENT_AT_ONCE_BELOW,
    ):
        self._send_batch = send
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._in_flight = in_flight
        self._at_once_below = at_once_below
        self._gate: asyncio.Semaphore | None = None  # made on first use, inside the running loop
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the gate and the queues belong to
        self._queued: dict[bool, list[Queued]] = {True: [], False: []}
        self._sending: dict[bool, int] = {True: 0, False: 0}  # batches of each kind sent and not yet answered
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, rows: Rows, *, logged: bool = True) -> None:
        """Write `rows` now if few batches of their kind are in flight, else in the group that leaves when one is
        acknowledged; returns once the batch carrying them was acknowledged."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a store used from another loop (tests): nothing of the old one carries over
            self._loop, self._gate = loop, asyncio.Semaphore(self._in_flight)
            self._queued, self._sending = {True: [], False: []}, {True: 0, False: 0}
        done: asyncio.Future[None] = loop.create_future()
        entry = (rows, estimated_bytes(rows), done)
        queue = self._queued[logged]
        if not leaves_at_once(self._sending[logged], len(queue), self._at_once_below):
            queue.append(entry)  # invariant: a queue is not empty only while a batch of its kind is in flight
            await done
            return
        # Sent from the caller's own task: the request is on its way before this loop round ends.
        self._sending[logged] += 1
        await self._send([entry], logged)
        await done

    def _flush(self, logged: bool, *, carry: bool = False) -> list[Queued] | None:
        """Send what is queued as few groups, each from a task of its own; with `carry`, the first group is
        returned instead, for the group task calling to send itself (a loop round sooner than a new task)."""
        queued, self._queued[logged] = self._queued[logged], []
        sizes = [(len(rows), size) for rows, size, _ in queued]
        groups = [[queued[i] for i in group] for group in groups_of(sizes, self.max_rows, self.max_bytes)]
        self._sending[logged] += len(groups)  # counted now, so that callers arriving before they leave queue
        first = groups.pop(0) if carry else None
        for group in groups:
            task = asyncio.ensure_future(self._carry(group, logged))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return first

    async def _carry(self, group: list[Queued], logged: bool) -> None:
        """A group's task: send it, then, as long as callers queued meanwhile, the first group of them."""
        following: list[Queued] | None = group
        while following is not None:
            following = await self._send(following, logged, carry=True)

    async def _send(self, group: list[Queued], logged: bool, *, carry: bool = False) -> list[Queued] | None:
        """Write one group (counted in `_sending` by the caller) and answer its callers; then send what queued
        meanwhile (with `carry`, its first group is returned for the caller to send)."""
        sending, queued = self._sending, self._queued  # this loop's (a store used from another loop starts anew)
        try:
            await self._write_group(group, logged)
        except BaseException:
            sending[logged] -= 1
            if queued[logged] and queued is self._queued:
                self._flush(logged)  # each group in a task of its own: this one is going away
            raise
        sending[logged] -= 1
        if queued[logged] and queued is self._queued:
            return self._flush(logged, carry=carry)
        return None

    async def _write_group(self, group: list[Queued], logged: bool) -> None:
        waiting = [done for _, _, done in group if not done.done()]  # a caller gone (cancelled) is not waited for
        if not waiting:
            return
        try:
            async with self._gate or asyncio.Semaphore(self._in_flight):
                await self._send_batch([row for rows, _, _ in group for row in rows], logged)
        except Exception as exc:
            if len(group) > 1 and not getattr(exc, "retriable", False):
                # Refused for what it holds (a batch too large, a bad value), not for the cluster: each caller's
                # rows alone, so that one create's refusal is not every create's of the group.
                await asyncio.gather(*(self._write_group([entry], logged) for entry in group))
            else:
                answer_all(waiting, exc)
        except BaseException as exc:  # cancelled: every caller of the group sees it
            answer_all(waiting, exc)
            raise
        else:
            answer_all(waiting, None)


def answer_all(waiting: Sequence[asyncio.Future[Any]], exc: BaseException | None) -> None:
    """Tell each caller still waiting its group's outcome (None: done; a cancellation cancels; else the error)."""
    for done in waiting:
        if done.done():
            continue
        if exc is None:
            done.set_result(None)
        elif isinstance(exc, asyncio.CancelledError):
            done.cancel()  # a cancelled caller raises its own cancellation; nobody else is left to read it
        else:
            done.set_exception(exc)
