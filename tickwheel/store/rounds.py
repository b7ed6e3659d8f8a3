"""Round grouping: what the runs handled together ask of Cassandra during one event-loop round leaves as one request.

A worker's runs move through its pipeline in step: the runs of one lane poll start in the same round, read their
jobs in the same round, get their flow-control answers from one Redis pipeline in the same round, and so write
their claims' rows in the same round. Each of those was a request of its own, and most of a small request's cost
is per request, not per row: in the worker the driver's call, its I/O thread's send, receive and decoding, the
callback's hop back to the event loop (~0.1-0.2 ms of CPU each); in Cassandra the native transport's handling.

`RoundBatches` gathers the unlogged batches asked for during one round and writes them after it as few batches as
the limits allow; `RoundReads` gathers the point reads of one table by key and reads them with one `key IN ?`
read. Like the Redis scripts' `ScriptBatcher`, it waits for nothing but the end of the round: a request alone in
its round leaves one round later, as it was (a lone read with its own `key = ?` statement, token-aware), and under
load the groups are what arrived together. What a caller may rely on is unchanged: its call returns once its own
rows were acknowledged (or its own row read) at the store's consistency; an unlogged batch never promised more
than each row written, so rows of several callers in one batch promise the same. A group the cluster did not
take fails each of its callers, as their own request would have; a group refused for what it holds (a batch too
large) is sent again as one batch per caller, so only the culprit fails.

Groups stay under Cassandra's `unlogged_batch_across_partitions_warn_threshold` (10 partitions by default): above
it every batch is answered with a warning, which the driver logs (ROUND_ROWS rows touch at most that many).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

from tickwheel.store.grouping import GROUP_BYTES, Rows, answer_all, estimated_bytes, groups_of

ROUND_ROWS = 10
"""Rows per grouped batch at most: each row is in one partition, so a batch touches at most Cassandra's default
`unlogged_batch_across_partitions_warn_threshold` (10) partitions and draws no warning."""
ROUND_KEYS = 32
"""Keys per grouped read at most: the read's coordinator waits for every partition of it."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Queued = tuple[Rows, int, "asyncio.Future[None]"]


class RoundBatches:
    """Unlogged batches asked for in one event-loop round, written as few batches after it. `send(rows)` writes
    one unlogged batch (the store's `batch`)."""

    def __init__(
        self,
        send: Callable[[Rows], Awaitable[None]],
        *,
        max_rows: int = ROUND_ROWS,
        max_bytes: int = GROUP_BYTES,
    ):
        self._send = send
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._queued: list[Queued] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the queue belongs to
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, rows: Rows) -> None:
        """Write `rows` in the batch that leaves at the end of this round; returns once it was acknowledged."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if loop is not self._loop:  # a store used from another loop (tests): nothing queued on the old one carries over
            self._loop, self._queued = loop, []
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.append((rows, estimated_bytes(rows), done))
        await done

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        sizes = [(len(rows), size) for rows, size, _ in queued]
        for group in groups_of(sizes, self.max_rows, self.max_bytes):
            task = asyncio.ensure_future(self._write_group([queued[i] for i in group]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_group(self, group: list[Queued]) -> None:
        waiting = [done for _, _, done in group if not done.done()]  # a caller gone (cancelled) is not waited for
        if not waiting:
            return
        try:
            await self._send([row for rows, _, _ in group for row in rows])
        except Exception as exc:
            if len(group) > 1 and not getattr(exc, "retriable", False):
                # Refused for what it holds, not for the cluster: each caller's rows alone, so that one caller's
                # refusal is not every caller's of the group.
                await asyncio.gather(*(self._write_group([entry]) for entry in group))
            else:
                answer_all(waiting, exc)
        except BaseException as exc:  # cancelled: every caller of the group sees it
            answer_all(waiting, exc)
            raise
        else:
            answer_all(waiting, None)


class RoundReads(Generic[K, V]):
    """Point reads by key asked for in one event-loop round, read after it together: `one(key)` alone in its
    round, else `many(keys)` (a `key IN ?` read answering what it found by key) per ROUND_KEYS distinct keys.
    A caller gets its key's value, or None when the read found nothing for it."""

    def __init__(
        self,
        one: Callable[[K], Awaitable[V | None]],
        many: Callable[[Sequence[K]], Awaitable[Mapping[K, V]]],
        *,
        max_keys: int = ROUND_KEYS,
    ):
        self._one = one
        self._many = many
        self.max_keys = max_keys
        self._queued: dict[K, list[asyncio.Future[V | None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, key: K) -> V | None:
        """The value of `key`, read with the other keys asked for in this round."""
        loop = asyncio.get_running_loop()
        found: asyncio.Future[V | None] = loop.create_future()
        if loop is not self._loop:
            self._loop, self._queued = loop, {}
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.setdefault(key, []).append(found)
        return await found

    def _flush(self) -> None:
        queued, self._queued = self._queued, {}
        keys = list(queued)
        for start in range(0, len(keys), self.max_keys):
            group = {key: queued[key] for key in keys[start : start + self.max_keys]}
            task = asyncio.ensure_future(self._read(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read(self, group: dict[K, list[asyncio.Future[V | None]]]) -> None:
        waiting = [found for futures in group.values() for found in futures if not found.done()]
        if not waiting:
            return
        try:
            if len(group) == 1:
                [key] = group
                values: Mapping[K, V | None] = {key: await self._one(key)}
            else:
                values = await self._many(list(group))
        except Exception as exc:  # the read failed: every caller of the group sees it
            answer_all(waiting, exc)
            return
        except BaseException as exc:
            answer_all(waiting, exc)
            raise
        for key, futures in group.items():
            for found in futures:
                if not found.done():
                    found.set_result(values.get(key))
