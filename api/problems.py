"""The one place errors become HTTP answers: application/problem+json (RFC 9457) with a person's message.

`TickwheelError` subclasses carry their status; aiohttp's own HTTP errors (unknown route, wrong method, body
too large) are rendered the same way; anything else is a 500 that is logged with its traceback.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tickwheel import metrics
from tickwheel.errors import TickwheelError

log = logging.getLogger(__name__)

PROBLEM_TYPE = "application/problem+json"
DEFAULT_RETRY_AFTER_S = 1.0
DEPENDENCIES = ("Cassandra", "Kafka", "Redis", "ZooKeeper")


def problem_document(status: int, title: str, detail: str, field: str | None = None) -> dict[str, Any]:
    """The problem+json object (RFC 9457) itself: the body of an error answer, or of one failed batch item."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if field:
        body["field"] = field
    return body


def error_document(exc: TickwheelError, *, field: str | None = None) -> dict[str, Any]:
    """The problem object of an error (`field` overrides the error's own: a batch item names its index)."""
    detail = exc.message if exc.status < 500 else public_detail(exc.message)
    return problem_document(exc.status, exc.title, detail, field or exc.field)


def problem(
    status: int, title: str, detail: str, *, field: str | None = None, retry_after_s: float | None = None
) -> web.Response:
    body = problem_document(status, title, detail, field)
    headers = {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    return web.Response(status=status, text=json.dumps(body), content_type=PROBLEM_TYPE, headers=headers)


def _from_error(exc: TickwheelError) -> web.Response:
    retry_after = exc.retry_after_s
    if retry_after is None and exc.retriable:
        retry_after = DEFAULT_RETRY_AFTER_S
    body = error_document(exc)
    return problem(exc.status, exc.title, body["detail"], field=exc.field, retry_after_s=retry_after)


def public_detail(message: str) -> str:
    """What an anonymous caller may read of a server-side failure: which dependency, never where it runs (the
    adapters' messages name hosts and ports; the full message is in the log)."""
    lowered = message.lower()
    named = [(lowered.find(name.lower()), name) for name in DEPENDENCIES if name.lower() in lowered]
    dependency = min(named)[1] if named else "a server this API depends on"
    return f"{dependency} is unavailable; try again later"


def _from_http(exc: web.HTTPException) -> web.StreamResponse:
    if exc.status < 400:
        raise exc
    detail = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
    if exc.status == 413:
        detail = "the request body is larger than this API accepts"
    response = problem(exc.status, exc.reason, detail)
    if exc.status == 405 and "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response


def route_of(request: web.Request) -> str:
    """The route template (bounded label), not the path with its ids."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        response = await handler(request)
    except TickwheelError as exc:
        if exc.status >= 500:
            log.warning("%s %s answered %s: %s", request.method, request.path, exc.status, exc.message)
        response = _from_error(exc)
    except web.HTTPException as exc:
        response = _from_http(exc)
    except ConnectionResetError:
        # The client went away mid-request: no one reads an answer, and aiohttp drops such a connection quietly.
        # Not an error of ours (a soak logged 1,189 as "unhandled"); counted under nginx's 499.
        metrics.api_requests.labels(request.method, route_of(request), "499").inc()
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        response = problem(500, "Internal error", "the server failed to answer; the failure was logged")
    route = route_of(request)
    metrics.api_requests.labels(request.method, route, str(response.status)).inc()
    metrics.api_latency.labels(request.method, route).observe(time.perf_counter() - started)
    return response
