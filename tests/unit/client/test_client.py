"""Client behaviour without a network: idempotency keys and retries, Retry-After, typed errors, paging, config.

httpx's MockTransport stands in for the API here; the same behaviours run against the real API in
tests/integration/client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tickwheel_client import (
    AsyncClient,
    Client,
    Config,
    ConfigError,
    ConnectionFailed,
    HttpTarget,
    InvalidInput,
    JobState,
    NotFound,
    PreconditionFailed,
    RateLimited,
    Retries,
    Schedule,
    Unavailable,
    UnexpectedAnswer,
)
from tickwheel_client.retry import retry_after_s

URL = "http://api.test"
JOB_ID = "6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10"
FAST = Retries(max_attempts=4, base_delay_s=0.01, max_delay_s=5.0, jitter=lambda: 0.0)


def job_document(**overrides: Any) -> dict[str, Any]:
    return {
        "id": JOB_ID, "state": "ACTIVE", "version": 1, "next_run_at": "2026-12-01T09:00:00.000+00:00",
        "schedule": {"type": "cron", "expr": "0 9 * * *", "tz": "Europe/Paris"},
        "target": {"type": "http", "url": "https://example.com/hook"}, **overrides,
    }  # fmt: skip


def problem(
    status: int, detail: str, field: str | None = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {
        "type": "about:blank",
        "title": "t",
        "status": status,
        "detail": detail,
        **({"field": field} if field else {}),
    }
    return httpx.Response(status, json=body, headers={"Content-Type": "application/problem+json", **(headers or {})})


class Recorder:
    """A scripted API: answers in order, and every request it saw."""

    def __init__(self, *answers: httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


def client(recorder: Recorder, slept: list[float] | None = None) -> Client:
    naps = slept if slept is not None else []
    return Client(api_url=URL, api_key="k-secret", retries=FAST, transport=httpx.MockTransport(recorder),
                  sleep=naps.append)  # fmt: skip


def create(tw: Client, **kwargs: Any) -> Any:
    schedule = Schedule.cron("0 9 * * *", tz="Europe/Paris")
    return tw.create_job(
        schedule=schedule, target=HttpTarget(url="https://example.com/hook"), payload={"report": "daily"}, **kwargs
    )


def test_a_create_retried_after_503_and_429_sends_the_same_idempotency_key_and_honours_retry_after() -> None:
    api = Recorder(
        problem(503, "cassandra did not answer", headers={"Retry-After": "2"}),
        problem(429, "slow down", headers={"Retry-After": "1"}),
        httpx.ConnectError("refused"),
        httpx.Response(201, json=job_document()),
    )
    slept: list[float] = []
    job = create(client(api, slept))
    keys = {r.headers["Idempotency-Key"] for r in api.requests}
    assert len(api.requests) == 4 and len(keys) == 1 and uuid.UUID(keys.pop())
    assert slept == [2.0, 1.0, 0.04]  # Retry-After, Retry-After, then backoff 0.01 * 2**2
    assert json.loads(api.requests[0].content) == {
        "schedule": {"type": "cron", "expr": "0 9 * * *", "tz": "Europe/Paris"},
        "target": {"type": "http", "url": "https://example.com/hook"},
        "payload": {"report": "daily"},
    }
    assert api.requests[0].headers["Authorization"] == "Bearer k-secret"
    assert job.state is JobState.ACTIVE and job.next_run_at == datetime(2026, 12, 1, 9, tzinfo=UTC)


def test_the_callers_idempotency_key_is_sent_and_a_409_in_progress_is_retried_with_it() -> None:
    api = Recorder(problem(409, "in progress", headers={"Retry-After": "1"}), httpx.Response(201, json=job_document()))
    create(client(api), idempotency_key="order-42")
    assert [r.headers["Idempotency-Key"] for r in api.requests] == ["order-42", "order-42"]


def test_retries_stop_after_max_attempts_with_the_typed_error() -> None:
    api = Recorder(problem(503, "down", headers={"Retry-After": "1"}))
    with pytest.raises(Unavailable) as raised:
        create(client(api))
    assert len(api.requests) == FAST.max_attempts and raised.value.retriable and raised.value.retry_after_s == 1.0
    api = Recorder(httpx.ConnectError("refused"))
    with pytest.raises(ConnectionFailed):
        client(api).get_job(JOB_ID)
    assert len(api.requests) == FAST.max_attempts


def test_errors_are_typed_from_problem_json_and_never_retried_when_final() -> None:
    api = Recorder(problem(422, "cron expression has 4 fields", field="schedule.expr"))
    with pytest.raises(InvalidInput) as raised:
        create(client(api))
    assert (raised.value.status, raised.value.field, raised.value.detail) == (
        422,
        "schedule.expr",
        "cron expression has 4 fields",
    )
    assert len(api.requests) == 1
    with pytest.raises(NotFound):
        client(Recorder(problem(404, "no job"))).get_job(JOB_ID)
    with pytest.raises(RateLimited):
        Client(api_url=URL, api_key="k", retries=Retries(max_attempts=1),
               transport=httpx.MockTransport(Recorder(problem(429, "quota")))).get_job(JOB_ID)  # fmt: skip


def test_pause_sends_if_match_with_the_version_just_read() -> None:
    api = Recorder(
        lambda r: httpx.Response(200, json=job_document(version=7)),
        lambda r: httpx.Response(200, json=job_document(version=8, state="PAUSED", next_run_at=None)),
    )
    paused = client(api).pause_job(JOB_ID)
    patch = api.requests[1]
    assert (
        patch.method == "PATCH"
        and patch.headers["If-Match"] == '"7"'
        and json.loads(patch.content) == {"state": "PAUSED"}
    )
    assert paused.state is JobState.PAUSED and paused.next_run_at is None and "Idempotency-Key" in patch.headers
    with pytest.raises(PreconditionFailed):
        client(Recorder(problem(412, "the job is at version 9"))).update_job(JOB_ID, version=8, name="x")


def test_lists_follow_next_cursor_until_the_last_page() -> None:
    pages = {None: ["a", "b"], "c1": ["c"], "c2": []}
    following = {None: "c1", "c1": "c2", "c2": None}

    def answer(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        items = [{"id": str(uuid.uuid5(uuid.NAMESPACE_URL, n)), "scheduled_at": "2026-01-01T00:00:00Z",
                  "status": "DEAD", "attempt": 3} for n in pages[cursor]]  # fmt: skip
        return httpx.Response(
            200, json={"items": items, **({"next_cursor": following[cursor]} if following[cursor] else {})}
        )

    api = Recorder(answer)
    runs = list(client(api).list_runs(JOB_ID, status="DEAD", page_size=2))
    assert len(runs) == 3 and [r.url.params.get("cursor") for r in api.requests] == [None, "c1", "c2"]
    assert all(r.url.params["status"] == "DEAD" and r.url.params["limit"] == "2" for r in api.requests)


def test_an_instant_without_offset_is_refused_both_ways() -> None:
    with pytest.raises(ValueError, match="aware"):
        list(client(Recorder(httpx.Response(200, json={"items": []}))).list_dead_letters(since=datetime(2026, 1, 1)))
    naive = Recorder(httpx.Response(200, json=job_document(next_run_at="2026-12-01T09:00:00")))
    with pytest.raises(UnexpectedAnswer):
        client(naive).get_job(JOB_ID)
    with pytest.raises(ValueError):
        Schedule.once(datetime(2026, 1, 1))
    assert Schedule.once(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=1)).run_at == "2026-01-01T01:00:00+00:00"


def test_an_id_that_is_not_a_uuid_never_reaches_the_url() -> None:
    with pytest.raises(ValueError, match="not an id"):
        client(Recorder(httpx.Response(200, json={}))).get_job("../tenants")


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_s("3", now) == 3.0
    assert retry_after_s("Thu, 01 Jan 2026 00:00:05 GMT", now) == 5.0
    assert retry_after_s("soon", now) is None and retry_after_s(None) is None


async def test_the_async_client_retries_with_the_same_key_too() -> None:
    api = Recorder(problem(503, "down", headers={"Retry-After": "1"}), httpx.Response(201, json=job_document()))
    slept: list[float] = []

    async def nap(seconds: float) -> None:
        slept.append(seconds)

    async with AsyncClient(api_url=URL, api_key="k", retries=FAST, transport=httpx.MockTransport(api), sleep=nap) as tw:
        job = await tw.create_job(schedule=Schedule.every(300), target=HttpTarget(url="https://example.com"))
        pages = Recorder(httpx.Response(200, json={"items": [job_document()]}))
    assert job.version == 1 and slept == [1.0]
    assert len({r.headers["Idempotency-Key"] for r in api.requests}) == 1
    async with AsyncClient(api_url=URL, api_key="k", transport=httpx.MockTransport(pages)) as tw:
        assert [j.id async for j in tw.list_jobs()] == [uuid.UUID(JOB_ID)]


def test_config_from_environment_wins_over_the_profile_and_never_shows_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[default]\napi_url = "http://a.test"\napi_key = "k-file"\n[staging]\napi_url = "http://s.test"\n')
    assert Config.load(environ={}, path=path).api_url == "http://a.test"
    staged = Config.load("staging", environ={"TICKWHEEL_API_KEY": "k-env"}, path=path)
    assert (staged.api_url, staged.api_key) == ("http://s.test", "k-env")
    assert (
        Config.load(environ={"TICKWHEEL_API_URL": "http://e.test/", "TICKWHEEL_API_KEY": "k"}, path=path).api_url
        == "http://e.test"
    )
    assert "k-file" not in repr(Config.load(environ={}, path=path))
    with pytest.raises(ConfigError, match="no profile"):
        Config.load("prod", environ={}, path=path)
    with pytest.raises(ConfigError, match="no API key"):
        Config.load("staging", environ={}, path=path)
    with pytest.raises(ConfigError, match="unknown key"):
        path.write_text('[default]\napi_url = "http://a.test"\napi_token = "x"\n')
        Config.load(environ={}, path=path)


def test_the_servers_settings_let_the_clients_variables_pass_and_still_refuse_typos(tmp_path: Path) -> None:
    from tickwheel.errors import SettingsError
    from tickwheel.settings import Settings

    client_variables = {"TICKWHEEL_API_URL": "http://a.test", "TICKWHEEL_API_KEY": "k", "TICKWHEEL_PROFILE": "p"}
    assert Settings.from_env(client_variables, env_file=tmp_path / "none").api.port == 8080
    with pytest.raises(SettingsError):
        Settings.from_env({"TICKWHEEL_API_KEYS": "k"}, env_file=tmp_path / "none")
