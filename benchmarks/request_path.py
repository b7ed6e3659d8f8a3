"""The client's CPU per CQL request, three ways side by side: the store's direct path (store.direct), the driver's
Session path (`execute_async` and its ResponseFuture, what the store used before), and the floor (an EXECUTE
written on a pooled connection with nothing around it). Needs a Cassandra (`tickwheel stack up --only cassandra`):

    .venv/bin/python -m benchmarks.request_path --requests 4000 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop
from cassandra import ConsistencyLevel
from cassandra.protocol import ExecuteMessage, ResultMessage

from tickwheel.dev.platform import local_settings
from tickwheel.store.cassandra import CassandraStore

KEYSPACE = "request_path_bench"
INSERT = f"INSERT INTO {KEYSPACE}.t (k, a, b) VALUES (?, ?, ?)"


def values() -> list[object]:
    return [uuid.uuid4(), "x" * 40, 7]


def floor_of(store: CassandraStore, prepared: Any) -> Callable[[], Awaitable[None]]:
    """An EXECUTE written on a pooled connection, answered through one callback: nothing else."""
    loop = asyncio.get_running_loop()
    pool = next(iter(store._session._pools.values()))
    connection = next(iter(pool._connections.values()))

    async def floor() -> None:
        bound = await store.bound(INSERT, values())
        answer: asyncio.Future[object] = loop.create_future()
        message = ExecuteMessage(
            prepared.query_id, bound.values, ConsistencyLevel.QUORUM, None, None, None, None, skip_meta=True,
            result_metadata_id=prepared.result_metadata_id,
        )  # fmt: skip
        with connection.lock:
            connection.in_flight += 1
            request_id = connection.get_request_id()

        def answered(response: object) -> None:
            with connection.lock:
                connection.in_flight -= 1
            if not answer.done():
                answer.set_result(response)

        connection.send_msg(message, request_id, answered, result_metadata=prepared.result_metadata)
        assert isinstance(await answer, ResultMessage)

    return floor


async def drive(send: Callable[[], Awaitable[None]], requests: int, concurrency: int) -> tuple[float, float]:
    """CPU and wall seconds of `requests` sends, `concurrency` at a time."""

    async def lane(n: int) -> None:
        for _ in range(n):
            await send()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(lane(requests // concurrency) for _ in range(concurrency)))
    return time.process_time() - cpu, time.perf_counter() - wall


async def measure(args: argparse.Namespace) -> None:
    store = await CassandraStore.connect(local_settings().cassandra, keyspace=False)
    replication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    await store.execute_raw(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = {replication}")
    await store.execute_raw(f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.t (k uuid PRIMARY KEY, a text, b int)")
    prepared = await store.prepare(INSERT)
    direct, floor = store._direct, floor_of(store, prepared)

    async def through_store() -> None:
        await store.execute(INSERT, values())

    for _ in range(args.rounds):
        for name in ("direct", "driver", "floor"):
            store._direct = direct if name == "direct" else None
            send = floor if name == "floor" else through_store
            await drive(send, args.requests // 10, args.concurrency)  # warm
            cpu, wall = await drive(send, args.requests, args.concurrency)
            per_request = 1e6 * cpu / args.requests
            print(f"{name:7s} {per_request:7.1f} us CPU per request  {args.requests / wall:6.0f} requests/s")
    store._direct = direct
    await store.execute_raw(f"DROP KEYSPACE {KEYSPACE}")
    await store.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    p.add_argument("--rounds", type=int, default=3)
    uvloop.run(measure(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
