"""The worker's CPU per HTTP call, two ways side by side: aiohttp's ClientSession (what `HttpCaller` used before)
and `worker.http1` (what it uses now). The target is an aiohttp server in a process of its own, so only the
caller's CPU is counted; each call is a POST with a run's headers and body, answered 200 with a short body,
`--concurrency` calls in flight:

    .venv/bin/python -m benchmarks.call_path --calls 6000 --concurrency 4 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from collections.abc import Awaitable, Callable

import aiohttp
import uvloop
from aiohttp import web
from yarl import URL

from tickwheel.egress import EgressPolicy
from worker.http1 import Http1Client

BODY = b'{"order": 12345, "note": "a run\'s payload of a typical size for a webhook call"}' * 3
HEADERS = {
    "Content-Type": "application/json",
    "Idempotency-Key": "0b3c6f1e-8d0a-4e57-9d0e-2f1d3c4b5a69",
    "X-Tickwheel-Attempt": "1",
    "webhook-id": "0b3c6f1e-8d0a-4e57-9d0e-2f1d3c4b5a69",
    "webhook-timestamp": "1764892800",
    "webhook-signature": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
}


def serve(port: int) -> None:
    async def hook(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


async def drive(call: Callable[[], Awaitable[None]], calls: int, concurrency: int) -> float:
    """Microseconds of this process's CPU per call."""

    async def lane(n: int) -> None:
        for _ in range(n):
            await call()

    cpu = time.process_time()
    await asyncio.gather(*(lane(calls // concurrency) for _ in range(concurrency)))
    return (time.process_time() - cpu) / calls * 1e6


async def measure(args: argparse.Namespace) -> None:
    url = URL(f"http://127.0.0.1:{args.port}/hook")
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=512, ttl_dns_cache=10), trust_env=False, auto_decompress=False
    )
    client = Http1Client(EgressPolicy.from_cidrs(["127.0.0.0/8"]), user_agent="bench")

    async def through_aiohttp() -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with session.request(
            "POST", url, data=BODY, headers=dict(HEADERS), allow_redirects=False, timeout=timeout
        ) as response:
            await response.content.read(256)

    async def through_http1() -> None:
        await client.request("POST", url, BODY, HEADERS, 10, 256)

    for call in (through_aiohttp, through_http1):
        await drive(call, 1000, args.concurrency)  # warm: connections, caches
    for round_ in range(1, args.rounds + 1):
        for name, call in (("aiohttp ClientSession", through_aiohttp), ("worker.http1", through_http1)):
            us = await drive(call, args.calls, args.concurrency)
            print(f"round {round_}: {name:22s} {us:6.1f} us of CPU per call", flush=True)
    await session.close()
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18777)
    args = parser.parse_args()
    server = multiprocessing.Process(target=serve, args=(args.port,), daemon=True)
    server.start()
    time.sleep(1.5)
    try:
        uvloop.run(measure(args))
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
