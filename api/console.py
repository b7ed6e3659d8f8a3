"""The web console: static files (HTML, ES modules, CSS, the vendored chart library) served at /console/.

The files hold no data and need no key; every page calls the public API from the browser with the key the
person typed, kept in that tab's sessionStorage only. Nothing is fetched from another origin (the policy below
forbids it), so the console works offline.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC_DIR = Path(__file__).parent / "static" / "console"
PREFIX = "/console"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
        " font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

routes = web.RouteTableDef()


@routes.get(PREFIX)
async def to_console(request: web.Request) -> web.Response:
    raise web.HTTPFound(f"{PREFIX}/")


@routes.get(f"{PREFIX}/")
async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


routes.static(f"{PREFIX}/static", STATIC_DIR)


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    if request.path == PREFIX or request.path.startswith(f"{PREFIX}/"):
        response.headers.update(SECURITY_HEADERS)


def install(app: web.Application) -> None:
    """Serve the console from `app` (its routes and the security headers of its answers)."""
    app.add_routes(routes)
    app.on_response_prepare.append(_secure)
