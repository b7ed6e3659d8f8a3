"""Admission control on the real servers (issue 19): a burst of keyed creates beyond the bound is partly shed with
503 + Retry-After problem+json; a shed create wrote nothing (its key's job does not exist, and sent again with the
same Idempotency-Key it is created then, not replayed); the kept creates are durable; the probe routes answer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from api.idempotency import KEYED_JOBS
from tickwheel.store import jobs
from tickwheel.store.cassandra import CassandraStore

from .api_bodies import cron_job
from .conftest import Caller, problem_of

BURST = 40


async def test_shed_creates_write_nothing_and_are_created_when_sent_again(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    client = await make_client(max_in_flight=2, max_waiting=0)
    alice = await make_tenant(client)
    keys = [str(uuid.uuid4()) for _ in range(BURST)]

    def send(key: str) -> Awaitable[Any]:
        return alice.call("POST", "/v1/jobs", json=cron_job(), headers={"Idempotency-Key": key})

    answers = dict(zip(keys, await asyncio.gather(*(send(key) for key in keys)), strict=True))
    shed = [key for key, answer in answers.items() if answer.status == 503]
    kept = [key for key, answer in answers.items() if answer.status == 201]
    assert shed and len(kept) >= 2 and len(shed) + len(kept) == BURST
    assert (await client.get("/healthz")).status == 200 and (await client.get("/readyz")).status == 200

    for key in shed:
        assert (await problem_of(answers[key], 503))["title"] == "Overloaded"
        assert answers[key].headers["Retry-After"] in {"1", "2"}
        assert await jobs.get_job(store, uuid.uuid5(KEYED_JOBS, f"{alice.tenant_id}\n{key}")) is None
    for key in kept:
        job_id = uuid.UUID((await answers[key].json())["id"])
        assert await jobs.get_job(store, job_id) is not None

    for key in shed[:5]:
        again = await send(key)
        assert again.status == 201, await again.text()
        assert "Idempotent-Replayed" not in again.headers
