"""Probes, metrics and the OpenAPI document: the routes that need no API key."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from importlib import resources
from typing import Any

import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.messages import topic_names
from tickwheel.bus.kafka import partitions_of
from tickwheel.errors import Unavailable

from .context import Api, api_of

log = logging.getLogger(__name__)
routes = web.RouteTableDef()
READY_TIMEOUT_S = 3.0


@functools.cache
def openapi_document() -> dict[str, Any]:
    """schemas/openapi.yaml, parsed once."""
    text = resources.files("schemas").joinpath("openapi.yaml").read_text()
    document: dict[str, Any] = yaml.safe_load(text)
    return document


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Ready when Cassandra and Kafka answer (503 with Retry-After otherwise)."""
    api = api_of(request)
    for name, check in (("cassandra", _cassandra), ("kafka", _kafka)):
        try:
            await asyncio.wait_for(check(api), READY_TIMEOUT_S)
        except (Unavailable, TimeoutError) as exc:
            log.warning("readyz: %s is not reachable: %s", name, exc or "timed out")
            raise Unavailable(f"{name} is not reachable") from exc
    return web.json_response({"status": "ready"})


async def _cassandra(api: Api) -> None:
    await api.store.ping()


async def _kafka(api: Api) -> None:
    topic = topic_names(api.settings.kafka.topic_prefix)["near"]
    try:
        await partitions_of(api.settings.kafka, topic)
    except KeyError:
        raise Unavailable(f"Kafka has no topic {topic}; run `tickwheel migrate`") from None


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    response = web.Response(body=generate_latest())
    response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return response


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.Response(text=json.dumps(openapi_document()), content_type="application/json")
