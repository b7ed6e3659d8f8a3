"""Fault injection that tests own, so no shared server is ever stopped: a TCP proxy that can be cut (put it
between a process and Cassandra, Kafka or Redis), and an HTTP proxy in front of the API that can lose answers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

T = TypeVar("T")


class TcpProxy:
    """<listen_host>:<ephemeral> -> upstream; `cut()` closes every connection and refuses new ones until `restore()`.

    In front of Cassandra it must listen on the node's own address (`listen_host=upstream_host`): the driver takes
    the node's address from its `system.local` row and keeps only the port it was given, so on a stack whose node
    is 127.0.0.7 (`stack up --hosts`) a proxy on 127.0.0.1 was left and 127.0.0.7:<proxy port> refused.

    It runs its own event loop in a thread: the process under test may block its loop on the server behind the
    proxy (the Cassandra driver's first `prepare` of a statement is synchronous), and a proxy on that same loop
    would then never pass the answer it waits for.
    """

    def __init__(self, upstream_host: str, upstream_port: int, *, listen_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.port = 0
        self.cut_now = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> TcpProxy:
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._serve, self.listen_host, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_now:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        writer.close()
        self._writers.discard(writer)

    async def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    def cut(self) -> None:
        """Every open connection is closed and new ones are refused."""
        self.cut_now = True
        self._run(self._close_all())

    def restore(self) -> None:
        self.cut_now = False

    def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            self._run(self._server.wait_closed())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


HOP_HEADERS = ("content-length", "transfer-encoding", "content-encoding", "date", "server")


@dataclasses.dataclass
class LostAnswer:
    """An answer the API gave that the proxy did not pass on."""

    status: int
    body: dict[str, object]


@contextlib.asynccontextmanager
async def answer_losing_proxy(
    upstream: str, lose: int, method: str, path: str
) -> AsyncIterator[tuple[str, list[LostAnswer]]]:
    """An HTTP proxy in front of the API that forwards every request, but for the first `lose` requests matching
    method and path throws the API's answer away and says 503 with Retry-After instead: a reply lost on the way."""
    lost: list[LostAnswer] = []

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with (
            aiohttp.ClientSession() as http,
            http.request(request.method, upstream + request.path_qs, data=body, headers=headers) as answer,
        ):
            content = await answer.read()
            if request.method == method and request.path == path and len(lost) < lose:
                lost.append(LostAnswer(answer.status, json.loads(content)))
                problem = {"type": "about:blank", "title": "Service unavailable", "status": 503, "detail": "lost"}
                return web.json_response(problem, status=503, headers={"Retry-After": "1"})
            kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS}
            return web.Response(status=answer.status, body=content, headers=kept)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", lost
    finally:
        await runner.cleanup()
