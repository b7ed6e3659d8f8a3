"""/v1/operator/*: the platform as an operator sees it — lanes and their consumer lag, who owns each shard at
which epoch, runs due per coming minute, the sweeper's repairs, dead letters per tenant.

These routes take the operator key (settings.api.operator_key_sha256 holds its sha256), never a tenant key;
the tenant authentication middleware lets them through to `operator_only`. Reads go through tickwheel.store
and tickwheel.bus only.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any

from aiohttp import web

from schemas.messages import LANES, topic_names, worker_group
from tickwheel.bus.kafka import consumer_lag
from tickwheel.errors import Unauthorized
from tickwheel.store.checkpoints import Checkpoint

from .context import api_of
from .responses import json_response, page_limit
from .wire import instant

routes = web.RouteTableDef()
DEAD_WINDOWS_S = (3600, 86_400)
MAX_TENANTS = 500
OperatorHandler = Callable[[web.Request], Awaitable[web.Response]]


def operator_only(handler: OperatorHandler) -> OperatorHandler:
    """Answer only a request that carries the operator key (401 otherwise, and while none is configured)."""

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.Response:
        expected = api_of(request).settings.api.operator_key_sha256
        if not expected:
            raise Unauthorized("the operator endpoints are off: set TICKWHEEL_API_OPERATOR_KEY_SHA256")
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        given = hashlib.sha256(key.strip().encode()).hexdigest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, expected.lower()):
            raise Unauthorized("send the operator key as `Authorization: Bearer <key>` (a tenant key is refused)")
        return await handler(request)

    return checked


@routes.get("/v1/operator/lanes")
@operator_only
async def lanes(request: web.Request) -> web.Response:
    """Each lane's topic, its workers' consumer group and the messages that group has not committed."""
    settings = api_of(request).settings.kafka
    topics = topic_names(settings.topic_prefix)
    groups = [worker_group(settings.topic_prefix, lane) for lane in LANES]
    lags = await asyncio.gather(
        *(consumer_lag(settings, g, topics[lane]) for g, lane in zip(groups, LANES, strict=True))
    )
    items = [
        {"lane": lane, "topic": topics[lane], "group": group, "lag": sum(lag.values()), "partitions": len(lag)}
        for lane, group, lag in zip(LANES, groups, lags, strict=True)
    ]
    return json_response({"items": items})


@routes.get("/v1/operator/shards")
@operator_only
async def shards(request: web.Request) -> web.Response:
    """Every shard's owner and epoch as its checkpoint last recorded them, and the contiguous ranges they form."""
    api = api_of(request)
    found = await api.store.read_checkpoints(range(api.settings.shards))
    now = api.clock()
    cells = [
        {"shard": s, "owner": c.owner, "epoch": c.owner_epoch, "fired_through": instant(c.fired_through)}
        if (c := found.get(s))
        else {"shard": s, "owner": None, "epoch": None, "fired_through": None}
        for s in range(api.settings.shards)
    ]
    return json_response({
        "shards": api.settings.shards,
        "owned": len(found),
        "as_of": instant(now),
        "ranges": owned_ranges(found.get(s) for s in range(api.settings.shards)),
        "cells": cells,
    })  # fmt: skip


def owned_ranges(cells: Iterable[Checkpoint | None]) -> list[dict[str, Any]]:
    """Runs of consecutive shards with the same (owner, epoch), as [start, end) ranges; unowned shards split them."""
    ranges: list[dict[str, Any]] = []
    for shard, cell in enumerate(cells):
        key = None if cell is None else (cell.owner, cell.owner_epoch)
        last = ranges[-1] if ranges else None
        if key is not None and last is not None and last["end"] == shard and (last["owner"], last["epoch"]) == key:
            last["end"] = shard + 1
        elif key is not None:
            ranges.append({"owner": key[0], "epoch": key[1], "start": shard, "end": shard + 1})
    return ranges


@routes.get("/v1/operator/forecast")
@operator_only
async def forecast(request: web.Request) -> web.Response:
    """Runs due in each coming minute (k = 0 is the current minute), counted over every shard's bucket."""
    api = api_of(request)
    minutes = page_limit(request, 60, name="minutes", default=api.settings.coordinator.forecast_minutes)
    start = api.clock().replace(second=0, microsecond=0)
    counts = await api.store.due_per_minute(start, minutes, api.settings.shards)
    return json_response({"start": instant(start), "bucket_s": 60, "counts": counts})


@routes.get("/v1/operator/sweeper")
@operator_only
async def sweeper(request: web.Request) -> web.Response:
    """Sweeps finished and the repairs they made, by reason, since the keyspace was made."""
    sweeps, repairs = await api_of(request).store.sweeper_counts()
    return json_response({"sweeps": sweeps, "repairs": repairs})


@routes.get("/v1/operator/dead-letters")
@operator_only
async def dead_letters(request: web.Request) -> web.Response:
    """Dead letters per tenant over the last hour and the last day, busiest tenants first."""
    api = api_of(request)
    now = api.clock()
    listed = (await api.store.list_tenants())[:MAX_TENANTS]
    gate = asyncio.Semaphore(16)

    async def counts(tenant_id: str) -> list[int]:
        async with gate:
            return [
                await api.store.dead_letters_since(tenant_id, now - timedelta(seconds=s))
                for s in DEAD_WINDOWS_S
            ]

    found = await asyncio.gather(*(counts(t.tenant_id) for t in listed))
    ranked = sorted(zip(listed, found, strict=True), key=lambda pair: (-pair[1][0], -pair[1][1], pair[0].name))
    items = [
        {"tenant_id": t.tenant_id, "name": t.name, "last_hour": hour, "last_day": day, "per_hour_last_day": day / 24}
        for t, (hour, day) in ranked
    ]
    return json_response({"as_of": instant(now), "items": items})
