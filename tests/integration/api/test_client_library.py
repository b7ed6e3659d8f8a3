"""tickwheel_client against the real API on the real servers: every endpoint, paging, typed errors, and
retries that keep their Idempotency-Key through the API's real 503s (its Cassandra, or its Redis, reached
through a TCP proxy this test owns and cuts; the shared servers keep running) and through an answer lost on
the way (an HTTP proxy this test owns in front of the API)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from aiohttp.test_utils import TestClient, TestServer

from api.app import make_app
from tests.integration.api.conftest import Caller, api_settings, existing_run
from tests.integration.api.proxies import TcpProxy, answer_losing_proxy
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.flow.redis import RedisClient
from tickwheel.settings import Settings
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.dead_letters import add_dead_letter
from tickwheel.store.tables import CassandraTables
from tickwheel_client import (
    AsyncClient,
    Change,
    ChangeAction,
    Client,
    Conflict,
    DiffOp,
    HttpTarget,
    InvalidInput,
    JobSpec,
    JobState,
    NotFound,
    Notify,
    NotifyEvent,
    PreconditionFailed,
    Priority,
    Retries,
    RunStatus,
    Schedule,
    Unauthorized,
)


def base_url(caller: Caller) -> str:
    return str(caller.client.make_url("")).rstrip("/")


@dataclasses.dataclass
class Seen:
    method: str
    path: str
    key: str | None
    status: int
    replayed: bool


class RecordingTransport(httpx.AsyncHTTPTransport):
    """The real transport, noting every exchange (so a test sees the retries the client makes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Seen] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        key = request.headers.get("Idempotency-Key")
        self.seen.append(Seen(request.method, request.url.path, key, response.status_code, replayed))
        return response


def no_wait(slept: list[float]) -> Callable[[float], Awaitable[None]]:
    """A sleep that only notes how long the client wanted to wait."""

    async def nap(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    return nap


def cron(**fields: Any) -> dict[str, Any]:
    return {"schedule": Schedule.cron("0 9 * * *", tz="Europe/Paris"), "target": HttpTarget(url="https://example.com/hook"),
            "payload": {"report": "daily"}, **fields}  # fmt: skip


@pytest.fixture
async def tw(alice: Caller) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(api_url=base_url(alice), api_key=alice.key) as client:
        yield client


async def test_jobs_end_to_end_through_the_async_client(tw: AsyncClient) -> None:
    assert (await tw.health())["status"] == "ok"
    assert "paths" in await tw.openapi()
    assert "tickwheel" in await tw.metrics()
    job = await tw.create_job(**cron(name="nightly", labels={"team": "ops"}, priority=Priority.URGENT))
    assert job.state is JobState.ACTIVE and job.version == 1 and job.next_run_at is not None
    assert job.next_run_at.tzinfo is not None and job.priority is Priority.URGENT
    got = await tw.get_job(job.id)
    assert got.spec() == job.spec() and got.schedule.tz == "Europe/Paris"
    assert [j.id async for j in tw.list_jobs(label="team=ops")] == [job.id]
    renamed = await tw.update_job(job.id, name="nightly v2")
    assert (renamed.name, renamed.version, renamed.next_run_at) == ("nightly v2", 2, job.next_run_at)
    paused = await tw.pause_job(job.id)
    assert paused.state is JobState.PAUSED and paused.next_run_at is None
    assert [j.id async for j in tw.list_jobs(state=JobState.PAUSED)] == [job.id]
    resumed = await tw.resume_job(job.id, version=paused.version)
    assert resumed.state is JobState.ACTIVE and resumed.next_run_at is not None
    fires = await tw.preview_job(job.id, count=3)
    assert len(fires) == 3 and all(f.at.tzinfo is not None and f.local.utcoffset() is not None for f in fires)
    await tw.delete_job(job.id)
    await tw.delete_job(job.id)  # deleting a deleted job succeeds
    assert [j async for j in tw.list_jobs()] == []


async def test_a_batch_create_through_the_async_client(tw: AsyncClient) -> None:
    good, bad = JobSpec(**cron(name="one")), JobSpec(**cron(name="two", schedule=Schedule.cron("61 * * * *")))
    result = await tw.create_jobs([good, bad], idempotency_key="client-batch")
    assert (result.created, result.failed) == (1, 1)
    first, second = result.items
    assert first.status == 201 and first.job is not None and first.job.name == "one"
    assert second.status == 422 and second.problem is not None and second.problem.field is not None
    assert second.problem.field.startswith("jobs[1].schedule")
    again = await tw.create_jobs([good, bad], idempotency_key="client-batch")
    assert again.replayed == 1 and again.items[0].job is not None and again.items[0].job.id == first.job.id


async def test_runs_heartbeats_and_dead_letters_through_the_async_client(
    tw: AsyncClient, alice: Caller, store: CassandraStore
) -> None:
    job = await tw.create_job(**cron())
    assert job.next_run_id is not None
    now = datetime.now(UTC)
    run = await existing_run(store, job.next_run_id)
    claimed = await runs.claim(store, run, 0, "w1", now + timedelta(seconds=60), now)
    assert claimed.applied
    [summary] = [r async for r in tw.list_runs(job.id)]
    assert (summary.id, summary.status) == (job.next_run_id, RunStatus.RUNNING)
    lease = await tw.heartbeat(job.next_run_id, 1, extend_by_s=600)
    assert lease.lease_until > now + timedelta(seconds=500)
    with pytest.raises(Conflict) as held:
        await tw.heartbeat(job.next_run_id, 2)
    assert held.value.field == "attempt"
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.DEAD, error="HTTP 500"), "w1", now, now)
    await add_dead_letter(
        store, tenant_id=alice.tenant_id, run_id=run.run_id, job_id=run.job_id, target_host="example.com",
        payload=b"{}", last_error="HTTP 500", attempts=[{"attempt": 1, "code": 500}], dead_at=now, ttl_s=86400,
    )  # fmt: skip
    [letter] = [d async for d in tw.list_dead_letters(job_id=job.id, since=now - timedelta(minutes=1))]
    assert (letter.run_id, letter.target_host, letter.redriven_at) == (run.run_id, "example.com", None)
    dry = await tw.redrive_many(job_id=job.id, dry_run=True)
    assert (dry.dry_run, dry.matched, dry.run_ids) == (True, 1, [run.run_id])
    redriven = await tw.redrive(run.run_id)
    assert (redriven.run_id, redriven.status) == (run.run_id, RunStatus.RETRY)
    shown = await tw.get_run(run.run_id)
    assert shown.status is RunStatus.RETRY and shown.redrive_count == 1
    assert "redrive" in [a.kind for a in shown.attempts]
    with pytest.raises(NotFound):
        await tw.redrive(run.run_id)
    bulk = await tw.redrive_many(job_id=job.id)
    assert (bulk.matched, bulk.redriven) == (0, 0)


async def test_history_notifications_and_purges_through_the_async_client(
    tw: AsyncClient, alice: Caller, store: CassandraStore
) -> None:
    route = Notify(url="https://hooks.example/tw", events=[NotifyEvent.FAILED, NotifyEvent.RECOVERED])
    job = await tw.create_job(**cron(notify=route))
    assert job.notify == route
    await tw.pause_job(job.id)
    changes = [c async for c in tw.list_history(job.id, page_size=1)]
    assert [(c.action, c.version) for c in changes] == [(ChangeAction.PAUSE, 2), (ChangeAction.CREATE, 1)]
    assert changes[0].diff == [Change(op=DiffOp.REPLACE, path="/state", old="ACTIVE", value="PAUSED")]
    now = datetime.now(UTC)
    for host in ("a.example", "b.example"):
        await add_dead_letter(
            store, tenant_id=alice.tenant_id, run_id=uuid.uuid4(), job_id=job.id, target_host=host,
            payload=b"{}", last_error="HTTP 410", attempts=[], dead_at=now, ttl_s=86400,
        )  # fmt: skip
    dry = await tw.purge_many(target_host="a.example", dry_run=True)
    assert (dry.dry_run, dry.matched, dry.purged) == (True, 1, None)
    done = await tw.purge_many(target_host="a.example")
    assert (done.matched, done.purged) == (1, 1)
    assert [d.target_host async for d in tw.list_dead_letters(job_id=job.id)] == ["b.example"]


async def test_errors_arrive_typed_with_the_problems_field(tw: AsyncClient, alice: Caller) -> None:
    with pytest.raises(InvalidInput) as bad:
        await tw.create_job(schedule=Schedule.cron("61 * * * *"), target=HttpTarget(url="https://example.com"))
    assert bad.value.status == 422 and bad.value.field == "schedule.expr" and not bad.value.retriable
    with pytest.raises(NotFound):
        await tw.get_job(uuid.uuid4())
    job = await tw.create_job(**cron())
    with pytest.raises(PreconditionFailed) as stale:
        await tw.update_job(job.id, name="late", version=job.version + 5)
    assert stale.value.field == "If-Match"
    async with AsyncClient(api_url=base_url(alice), api_key="tw_not-a-key") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get_job(job.id)


async def test_an_unsaved_schedule_and_the_upcoming_load_through_the_async_client(tw: AsyncClient) -> None:
    fires = await tw.preview_schedule(Schedule.cron("30 2 * * *", tz="Europe/Paris"), count=3)
    assert len(fires) == 3 and all(f.local.utcoffset() is not None for f in fires)
    with pytest.raises(InvalidInput) as bad:
        await tw.preview_schedule(Schedule.cron("61 * * * *"))
    assert bad.value.field == "schedule.expr"

    await tw.create_job(**cron())
    hours = await tw.due_counts("hour")

    assert hours.bucket_s == 3600 and len(hours.counts) == 168 and hours.jobs_counted == 1
    assert sum(hours.counts) in (6, 7) and not hours.truncated  # 09:00 Paris on each of the next 7 days


async def test_lists_follow_the_cursor_across_several_pages(tw: AsyncClient) -> None:
    made = {(await tw.create_job(**cron(name=f"job {n}"))).id for n in range(7)}
    transport = RecordingTransport()
    async with AsyncClient(tw.config, transport=transport) as paging:
        listed = [job.id async for job in paging.list_jobs(page_size=3)]
    assert sorted(listed) == sorted(made) and len(listed) == 7
    assert len([s for s in transport.seen if s.path == "/v1/jobs"]) == 3


async def test_the_sync_client_does_the_same_from_a_thread(alice: Caller) -> None:
    def five_lines() -> tuple[Any, list[Any], Any]:
        with Client(api_url=base_url(alice), api_key=alice.key) as tw:
            job = tw.create_job(
                schedule=Schedule.cron("0 9 * * MON-FRI", tz="Europe/Paris"),
                target=HttpTarget(url="https://example.com/report"),
                payload={"report": "daily"},
            )
            listed = list(tw.list_jobs(page_size=1))
            return job, listed, tw.pause_job(job.id)

    job, listed, paused = await asyncio.to_thread(five_lines)
    assert [j.id for j in listed] == [job.id] and paused.state is JobState.PAUSED


async def test_a_create_while_the_apis_redis_is_cut_off_succeeds_at_once(
    settings: Settings, store: CassandraStore, producer: KafkaProducer, alice: Caller
) -> None:
    """The API's Redis goes through a TCP proxy this test owns. Redis holds limits, not truth: with it cut off the
    API fails open (bounded in process, issue 19), so the client's create succeeds at once, with no retry. (A 503
    retried with the same key is the Cassandra test below.)"""
    redis_url = urlsplit(settings.redis.url)
    proxy = TcpProxy(redis_url.hostname or "127.0.0.1", redis_url.port or 6379).start()
    proxied = dataclasses.replace(settings.redis, url=f"redis://127.0.0.1:{proxy.port}{redis_url.path}")
    redis = RedisClient(proxied, prefix=f"twcl{uuid.uuid4().hex[:8]}:")
    server = TestClient(TestServer(make_app(api_settings(settings), CassandraTables(store), producer, redis)))
    await server.start_server()
    slept: list[float] = []

    async def restore_then_wait(seconds: float) -> None:
        slept.append(seconds)
        proxy.restore()

    transport = RecordingTransport()
    url = str(server.make_url("")).rstrip("/")
    try:
        async with AsyncClient(api_url=url, api_key=alice.key, transport=transport, sleep=restore_then_wait) as tw:
            proxy.cut()
            job = await tw.create_job(**cron())
            listed = [j.id async for j in tw.list_jobs()]
    finally:
        await server.close()
        await redis.close()
        proxy.close()
    creates = [s for s in transport.seen if s.method == "POST"]
    assert [s.status for s in creates] == [201]
    assert creates[0].key is not None
    assert slept == []
    assert listed == [job.id]


async def test_a_create_answered_503_while_cassandra_is_cut_off_succeeds_once_with_the_same_key(
    settings: Settings, producer: KafkaProducer, redis: RedisClient, alice: Caller
) -> None:
    """The API's Cassandra goes through a TCP proxy this test owns; cutting it makes the real API answer 503."""
    host, _, port = settings.cassandra.hosts[0].rpartition(":")
    host = host or "127.0.0.1"
    proxy = TcpProxy(host, int(port), listen_host=host).start()  # on the node's own address (see TcpProxy)
    cut_off = dataclasses.replace(settings.cassandra, hosts=(f"{host}:{proxy.port}",), request_timeout_s=3.0)
    store = await CassandraStore.connect(cut_off)
    app = make_app(api_settings(settings, auth_cache_s=300.0), CassandraTables(store), producer, redis)
    server = TestClient(TestServer(app))
    await server.start_server()
    transport = RecordingTransport()
    slept: list[float] = []

    async def restore_then_wait(seconds: float) -> None:
        slept.append(seconds)
        proxy.restore()
        await asyncio.sleep(seconds)  # the driver reconnects on its own schedule; the API says 503 until then

    url = str(server.make_url("")).rstrip("/")
    retries = Retries(max_attempts=120, max_delay_s=1.0)  # the driver reconnects on its own backoff schedule
    try:
        async with AsyncClient(api_url=url, api_key=alice.key, transport=transport, sleep=restore_then_wait,
                               retries=retries) as tw:  # fmt: skip
            warm = await tw.create_job(**cron(name="before"))  # the key is now trusted for auth_cache_s
            proxy.cut()
            job = await tw.create_job(**cron(name="through the cut"))
            listed = sorted([j.name or "" async for j in tw.list_jobs()])
    finally:
        await server.close()
        await store.close()
        proxy.close()
    creates = [s for s in transport.seen if s.method == "POST"]
    during = [s for s in creates if s.key != creates[0].key]
    assert during[0].status == 503 and during[-1].status == 201 and len({s.key for s in during}) == 1
    assert {s.status for s in during[:-1]} == {503} and slept[0] >= 1.0
    assert warm.id != job.id and listed == ["before", "through the cut"]


async def test_an_answer_lost_on_the_way_is_replayed_for_the_same_key_and_the_job_exists_once(tw: AsyncClient) -> None:
    async with answer_losing_proxy(tw.config.api_url, 1, "POST", "/v1/jobs") as (url, lost):
        transport = RecordingTransport()
        slept: list[float] = []
        async with AsyncClient(api_url=url, api_key=tw.config.api_key, transport=transport,
                               sleep=no_wait(slept), retries=Retries(max_attempts=3)) as through:  # fmt: skip
            job = await through.create_job(**cron(name="exactly once"))
    [first] = lost
    assert first.status == 201 and first.body["id"] == str(job.id)
    assert [(s.status, s.replayed) for s in transport.seen] == [(503, False), (201, True)]
    assert len({s.key for s in transport.seen}) == 1 and slept == [1.0]
    assert [j.id async for j in tw.list_jobs()] == [job.id]
