"""The probe and metrics endpoints every process serves: /healthz, /readyz, /metrics (a tiny aiohttp app)."""

from __future__ import annotations

from collections.abc import Callable

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
