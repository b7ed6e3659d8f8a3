"""The probe and metrics endpoints every process serves: /healthz, /readyz, /metrics (a tiny aiohttp app, or, for
the dispatcher, a thread of its own)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


class HealthServer:
    """Serves /healthz (the process is up), /readyz (`ready()` says it can do its work) and /metrics."""

    def __init__(self, host: str, port: int, ready: Callable[[], bool]):
        self.host = host
        self.port = port
        self._ready = ready
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not ready"}, status=503, headers={"Retry-After": "1"})

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


class ThreadedHealthServer:
    """The same three endpoints, served by a thread of their own (the dispatcher's): /healthz answers while the
    event loop is busy (a long scan, a starved box), so the coordinator's probe, which evicts a member whose port
    accepts but does not answer for seconds, evicts only a process that is stopped as a whole (SIGSTOP). /readyz
    reads `ready()` from that thread: it must only read state, never await."""

    def __init__(self, host: str, port: int, ready: Callable[[], bool]):
        self.host = host
        self.port = port
        self._ready = ready
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> int:
        """Start listening and serving from a daemon thread; returns the bound port (useful with port 0)."""
        ready = self._ready

        class Handler(_Handler):
            is_ready = staticmethod(ready)

        self._server = _Server((self.host, self.port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="health", daemon=True
        )
        self._thread.start()
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
            self._server = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


class _Handler(BaseHTTPRequestHandler):
    timeout = 5.0  # a client that connects and sends nothing holds one request thread this long at most
    is_ready: Callable[[], bool]

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b'{"status": "ok"}', "application/json")
        elif self.path == "/readyz":
            try:
                ready = self.is_ready()
            except Exception:  # read from another thread mid-change: ask again at the next probe
                ready = False
            if ready:
                self._send(200, b'{"status": "ready"}', "application/json")
            else:
                self._send(503, b'{"status": "not ready"}', "application/json", {"Retry-After": "1"})
        elif self.path == "/metrics":
            self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
        else:
            self._send(404, b'{"status": "not found"}', "application/json")

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every half second: no access log."""
