"""Admission control through the whole app, on the in-memory store and bus (no servers): a burst beyond the
bound is shed at once with 503 + Retry-After problem+json before any store work, the requests kept succeed, the
probe routes are never shed, and once the burst is over every request is admitted again."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest
from aiohttp import ClientResponse, ClientTimeout, web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from prometheus_client import REGISTRY
from redis.exceptions import ConnectionError as RedisConnectionError

from api.admission import ADMISSION, NEVER_SHED, Admission, admission, policy_of
from api.app import make_app
from tickwheel.bus.memory import MemoryBus
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store.memory_api import MemoryApiStore
from tickwheel.store.records import Job, NewRun, Tenant

KEY = "tw_admission-test-key"
TENANT = Tenant("t-admission", "admission", None, ("whsec_dGVzdA==",))
BODY = {
    "schedule": {"type": "cron", "expr": "0 3 * * *", "tz": "Europe/Paris"},
    "target": {"type": "http", "url": "https://example.com/hook"},
}


@dataclasses.dataclass
class HeldStore(MemoryApiStore):
    """The in-memory store whose creates wait for `release` (requests held in flight), counting what reached it."""

    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    arrived: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    creates: int = 0
    authentications: int = 0

    async def create_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        self.creates += 1
        self.arrived.set()
        await self.release.wait()
        await super().create_job(job, first_run, now)

    async def authenticate(self, key: str) -> str | None:
        self.authentications += 1
        return await super().authenticate(key)

    async def holding(self, count: int) -> None:
        """Until `count` creates have reached the store (and are held there)."""
        while self.creates < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 5.0)


class NoRedis(RedisClient):
    """A Redis that never answers, without a network: every limit fails open to the process (api.local_limits)."""

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        raise RedisConnectionError("no Redis in unit tests")

    async def get_many(self, keys: Any) -> list[bytes | str | None]:
        raise RedisConnectionError("no Redis in unit tests")

    async def set_if_absent(self, key: str, value: int | str) -> bool:
        raise RedisConnectionError("no Redis in unit tests")

    async def decrement(self, key: str, amount: int = 1) -> int:
        raise RedisConnectionError("no Redis in unit tests")


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def shed_count(reason: str) -> float:
    return REGISTRY.get_sample_value("tickwheel_api_shed_total", {"reason": reason}) or 0.0


MakeClient = Callable[..., Awaitable[tuple[TestClient, HeldStore]]]


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """make_client(gate=, **api settings) -> a TestClient on a fresh app over a HeldStore (released at the end)."""
    made: list[tuple[TestClient, HeldStore]] = []

    async def make(gate: Admission | None = None, **api: Any) -> tuple[TestClient, HeldStore]:
        # The test's own loop runs the client too: its lag is the test's, not an overload to shed for.
        settings = Settings()
        settings = dataclasses.replace(
            settings, api=dataclasses.replace(settings.api, auth_cache_s=0.0, lag_target_s=0.0, **api)
        )
        store = HeldStore()
        store.tenants[TENANT.tenant_id] = TENANT
        store.add_key(TENANT.tenant_id, KEY)
        app = make_app(settings, store, MemoryBus(), NoRedis(settings.redis), gate=gate)  # type: ignore[arg-type]
        client = TestClient(TestServer(app), headers={"Authorization": f"Bearer {KEY}"})
        await client.start_server()
        made.append((client, store))
        return client, store

    yield make
    for client, store in made:
        store.release.set()
        await client.close()


async def create(client: TestClient) -> ClientResponse:
    """POST /v1/jobs, answered within 5 s (a request never shed waits for its held create until the test ends)."""
    response = await client.post("/v1/jobs", json=BODY, timeout=ClientTimeout(total=5.0))
    await response.read()
    return response


async def first_answered(tasks: list[asyncio.Task[ClientResponse]], count: int) -> set[asyncio.Task[ClientResponse]]:
    """The first `count` of `tasks` to finish, waiting at most 3 s for them (fewer if the time ran out)."""
    deadline = time.monotonic() + 3.0
    done: set[asyncio.Task[ClientResponse]] = set()
    while len(done) < count and time.monotonic() < deadline:
        finished, _ = await asyncio.wait(
            [task for task in tasks if task not in done],
            timeout=deadline - time.monotonic(),
            return_when=asyncio.FIRST_COMPLETED,
        )
        done |= finished
    return done


async def assert_shed(response: ClientResponse) -> None:
    assert response.status == 503
    assert response.content_type == "application/problem+json"
    assert (await response.json())["title"] == "Overloaded"
    assert response.headers["Retry-After"] in {"1", "2"}


async def test_a_burst_beyond_the_bound_is_shed_at_once_and_the_requests_kept_succeed(make_client: MakeClient) -> None:
    client, store = await make_client(max_in_flight=4, max_waiting=2, wait_max_s=0.2)
    full_before, waited_before = shed_count("queue_full"), shed_count("waited")
    kept = [asyncio.create_task(create(client)) for _ in range(4)]
    await store.holding(4)
    authentications = store.authentications

    started = time.monotonic()
    burst = [asyncio.create_task(create(client)) for _ in range(6)]
    done = await first_answered(burst, 6)
    # The six beyond the bound were answered 503 at once (two after waiting 0.2 s for a slot) while the four kept
    # are still held in the store.
    assert len(done) == 6 and time.monotonic() - started < 1.5 and not any(task.done() for task in kept)
    for task in done:
        await assert_shed(task.result())
    assert (shed_count("queue_full") - full_before, shed_count("waited") - waited_before) == (4, 2)
    # Shed before authentication: no store read nor write was made for them.
    assert (store.creates, store.authentications) == (4, authentications)

    store.release.set()
    assert [(await task).status for task in kept] == [201] * 4


async def test_the_shed_answers_come_quickly_even_while_the_kept_requests_are_held(make_client: MakeClient) -> None:
    client, store = await make_client(max_in_flight=2, max_waiting=0)
    held = [asyncio.create_task(create(client)) for _ in range(2)]
    await store.holding(2)

    started = time.monotonic()
    await assert_shed(await asyncio.wait_for(create(client), timeout=5.0))
    assert time.monotonic() - started < 1.0

    store.release.set()
    assert [(await task).status for task in held] == [201, 201]


async def test_probe_routes_are_answered_while_every_slot_is_taken(make_client: MakeClient) -> None:
    client, store = await make_client(max_in_flight=1, max_waiting=0)
    held = asyncio.create_task(create(client))
    await store.holding(1)

    await assert_shed(await create(client))
    for path in ("/healthz", "/metrics", "/v1/openapi.json"):
        response = await asyncio.wait_for(client.get(path), timeout=5.0)
        assert response.status == 200, path
    assert 'tickwheel_api_shed_total{reason="queue_full"}' in await (await client.get("/metrics")).text()

    store.release.set()
    assert (await held).status == 201


async def test_after_the_burst_every_request_is_admitted_again(make_client: MakeClient) -> None:
    client, store = await make_client(max_in_flight=3, max_waiting=1, wait_max_s=0.1)
    burst = [asyncio.create_task(create(client)) for _ in range(8)]
    assert len(await first_answered(burst, 5)) == 5
    store.release.set()
    await asyncio.gather(*burst)

    again = await asyncio.gather(*(create(client) for _ in range(3)))
    assert [response.status for response in again] == [201] * 3
    gate = client.app[ADMISSION]
    assert (gate.in_flight, gate.waiting) == (0, 0)


async def test_a_loop_that_lags_for_a_whole_interval_sheds_until_one_probe_is_on_time(make_client: MakeClient) -> None:
    clock = Clock()
    settings = dataclasses.replace(Settings().api, lag_target_s=0.5, overload_interval_s=1.0)
    gate = Admission(policy_of(settings), clock=clock)
    client, store = await make_client(gate=gate)
    store.release.set()
    lag_before = shed_count("loop_lag")

    gate.lag_sampled(0.8)
    clock.now += 0.5
    gate.lag_sampled(0.9)
    assert (await create(client)).status == 201  # half an interval: a hiccup, not an overload
    clock.now += 0.5
    gate.lag_sampled(0.7)
    await assert_shed(await create(client))
    assert (await client.get("/healthz")).status == 200
    assert shed_count("loop_lag") - lag_before == 1

    gate.lag_sampled(0.01)
    assert (await create(client)).status == 201


@pytest.mark.parametrize("path", sorted(NEVER_SHED))
async def test_the_probe_routes_pass_an_overloaded_gate_untouched(path: str) -> None:
    clock = Clock()
    gate = Admission(policy_of(Settings().api), clock=clock)
    gate.lag_sampled(5.0)
    clock.now += 10.0
    gate.lag_sampled(5.0)  # standing lag: everything else is shed
    app = web.Application()
    app[ADMISSION] = gate

    async def answers(request: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok"})

    assert (await admission(make_mocked_request("GET", path, app=app), answers)).status == 200
    assert (await admission(make_mocked_request("GET", "/v1/jobs", app=app), answers)).status == 503


async def test_a_waiting_request_cancelled_as_its_slot_is_handed_over_passes_the_slot_on() -> None:
    gate = Admission(dataclasses.replace(policy_of(Settings().api), max_in_flight=1))
    assert await gate.enter() is None
    waiting = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    assert gate.waiting == 1

    gate.leave()  # hands the slot to the waiting request...
    waiting.cancel()  # ...whose client leaves before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (gate.in_flight, gate.waiting) == (0, 0)
