"""A local HTTP sink: the target of tests, the demo and the end-to-end checker.

It records every call (method, path, query, headers, body, when, what it answered) and answers as the URL asks:

    ?status=500            answer this status (default 200)
    ?seq=500,500,200       the n-th call to this path answers the n-th status (the last one repeats)
    ?delay_ms=200          wait before answering
    ?delay_seq=5000,0      the n-th call to this path waits the n-th delay (the last one repeats)
    ?retry_after=3         send `Retry-After: 3`
    ?redirect=/elsewhere   answer 302 (or ?status=3xx) with this Location
    ?reset=1               drop the connection without answering
    ?body=text             answer this body

`GET /_sink/calls?since=N` lists the calls recorded from index N as JSON; `DELETE /_sink/calls` forgets them.
In tests, use the `Sink` object directly: `url(path, **instructions)`, `calls_to(path)`, `wait_for(path, n)`,
`peak_concurrency(path)`. A call is recorded once answered; `arrivals` holds every request as it arrives (status
None), for tests that must act while a call is in progress (`wait_arrived(path, n)`).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

CALLS_PATH = "/_sink/calls"
# How long a test waits for calls by default: they come through a worker's new consumer group, a claim and the
# call, seconds late on a loaded box. A wait returns as soon as they are there, so only a failing test waits it out.
WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class SinkCall:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    received_at: float  # unix seconds
    status: int | None  # None: the connection was reset

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "body_b64": base64.b64encode(self.body).decode(),
            "received_at": self.received_at,
            "status": self.status,
        }


class Sink:
    """The sink server; `start()` binds (port 0 picks a free port), `stop()` closes it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port
        self.calls: list[SinkCall] = []
        self.arrivals: list[SinkCall] = []
        self._counts: dict[str, int] = defaultdict(int)
        self._inflight: dict[str, int] = defaultdict(int)
        self._peaks: dict[str, int] = defaultdict(int)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str, **instructions: Any) -> str:
        query = f"?{urlencode(instructions)}" if instructions else ""
        return f"{self.base_url}{path}{query}"

    def calls_to(self, path: str) -> list[SinkCall]:
        return [c for c in self.calls if c.path == path]

    def peak_concurrency(self, path: str) -> int:
        return self._peaks[path]

    async def wait_for(self, path: str, count: int, timeout_s: float = WAIT_S) -> list[SinkCall]:
        """Wait until `path` received at least `count` calls; returns them (raises TimeoutError)."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len(self.calls_to(path)) >= count)
        return self.calls_to(path)

    async def wait_arrived(self, path: str, count: int, timeout_s: float = WAIT_S) -> list[SinkCall]:
        """Wait until `path` received at least `count` requests, answered or not."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len([c for c in self.arrivals if c.path == path]) >= count)
        return [c for c in self.arrivals if c.path == path]

    async def start(self) -> Sink:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_get(CALLS_PATH, self._list_calls)
        app.router.add_delete(CALLS_PATH, self._forget_calls)
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Sink:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        received_at = time.time()
        body = await request.read()
        path = request.path
        self._counts[path] += 1
        self._inflight[path] += 1
        self._peaks[path] = max(self._peaks[path], self._inflight[path])
        await self._record(request, body, received_at, None, self.arrivals)
        try:
            plan = _Plan.of(request.query, self._counts[path])
            if plan.delay_ms:
                await asyncio.sleep(plan.delay_ms / 1000)
        finally:
            self._inflight[path] -= 1
        await self._record(request, body, received_at, None if plan.reset else plan.status, self.calls)
        if plan.reset:
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("sink reset the connection on request")
        return plan.response()

    async def _record(
        self, request: web.Request, body: bytes, received_at: float, status: int | None, into: list[SinkCall]
    ) -> None:
        call = SinkCall(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            body=body,
            received_at=received_at,
            status=status,
        )
        async with self._changed:
            into.append(call)
            self._changed.notify_all()

    async def _list_calls(self, request: web.Request) -> web.Response:
        since = int(request.query.get("since", "0"))
        return web.json_response({"items": [c.to_json() for c in self.calls[since:]], "next": len(self.calls)})

    async def _forget_calls(self, request: web.Request) -> web.Response:
        self.calls.clear()
        self.arrivals.clear()
        self._counts.clear()
        self._peaks.clear()
        return web.Response(status=204)


@dataclass(frozen=True, slots=True)
class _Plan:
    status: int
    delay_ms: int
    retry_after: str | None
    redirect: str | None
    reset: bool
    body: str

    @classmethod
    def of(cls, query: Any, nth_call: int) -> _Plan:
        redirect = query.get("redirect")
        status = int(query.get("status", 302 if redirect else 200))
        if "seq" in query:
            status = _nth(query["seq"], nth_call)
        delay_ms = _nth(query["delay_seq"], nth_call) if "delay_seq" in query else int(query.get("delay_ms", 0))
        return cls(
            status=status,
            delay_ms=delay_ms,
            retry_after=query.get("retry_after"),
            redirect=redirect,
            reset=query.get("reset") in ("1", "true"),
            body=query.get("body", "ok"),
        )

    def response(self) -> web.Response:
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = self.retry_after
        if self.redirect is not None:
            headers["Location"] = self.redirect
        return web.Response(status=self.status, text=self.body, headers=headers)


def _nth(steps: str, nth_call: int) -> int:
    """The n-th (1-based) of comma-separated integers; the last one repeats."""
    values = [int(s) for s in steps.split(",") if s]
    return values[min(nth_call, len(values)) - 1]


async def serve_sink(host: str, port: int) -> None:
    """Run a sink until cancelled (the `tickwheel sink` command)."""
    sink = await Sink(host, port).start()
    print(f"sink listening on {sink.base_url} (calls at {sink.base_url}{CALLS_PATH})", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await sink.stop()
