"""POST /v1/jobs/batch: many job bodies through the single-create path, each reported with its own status, the
whole batch idempotent under one Idempotency-Key (issue 14)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from api.idempotency import KEYED_JOBS
from tests.integration.api.api_bodies import once_job
from tests.integration.api.conftest import Caller
from tickwheel.errors import Unavailable
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore


def bodies(n: int) -> list[dict[str, Any]]:
    at = datetime.now(UTC) + timedelta(hours=1)
    return [once_job(at + timedelta(seconds=i), name=f"item {i}") for i in range(n)]


async def listed_ids(caller: Caller) -> set[str]:
    answer = await caller.call("GET", "/v1/jobs?limit=200")
    return {job["id"] for job in (await answer.json())["items"]}


async def test_every_item_is_created_durably_and_reported_in_order(alice: Caller, store: CassandraStore) -> None:
    answer = await alice.call("POST", "/v1/jobs/batch", json={"jobs": bodies(40)})
    assert answer.status == 200
    result = await answer.json()
    assert (result["created"], result["replayed"], result["failed"]) == (40, 0, 0)
    assert [item["index"] for item in result["items"]] == list(range(40))
    assert {item["status"] for item in result["items"]} == {201}
    assert [item["job"]["name"] for item in result["items"]] == [f"item {i}" for i in range(40)]
    for item in result["items"]:
        run = await runs.get_run(store, uuid.UUID(item["job"]["next_run_id"]))
        assert run is not None and run.status == "SCHEDULED"
    assert await listed_ids(alice) == {item["job"]["id"] for item in result["items"]}


async def test_an_invalid_item_is_refused_naming_it_and_its_field_while_the_others_are_created(alice: Caller) -> None:
    jobs = bodies(3)
    jobs[1]["schedule"] = {"type": "cron", "expr": "not a cron"}
    jobs[2]["target"] = {"type": "http", "url": "ftp://example.com/x"}
    result = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": [*jobs, bodies(1)[0]]})).json()
    assert (result["created"], result["failed"]) == (2, 2)
    assert [item["status"] for item in result["items"]] == [201, 422, 422, 201]
    first_bad, second_bad = result["items"][1]["problem"], result["items"][2]["problem"]
    assert first_bad["status"] == 422 and first_bad["field"].startswith("jobs[1].schedule")
    assert second_bad["field"].startswith("jobs[2].target")
    assert await listed_ids(alice) == {result["items"][0]["job"]["id"], result["items"][3]["job"]["id"]}


async def test_a_bad_envelope_is_a_422_naming_jobs_and_creates_nothing(alice: Caller) -> None:
    bad: tuple[Any, ...] = ([], {"jobs": {}}, {"jobs": []}, {"jobs": bodies(501)})
    for body in bad:
        answer = await alice.call("POST", "/v1/jobs/batch", json=body)
        assert answer.status == 422, body
        assert answer.content_type == "application/problem+json"
        assert (await answer.json())["field"] == "jobs"
    extra = await alice.call("POST", "/v1/jobs/batch", json={"jobs": bodies(1), "other": 1})
    assert extra.status == 422 and (await extra.json())["field"] == "other"
    assert await listed_ids(alice) == set()


async def test_the_same_batch_under_the_same_key_replays_every_item(alice: Caller) -> None:
    body, headers = {"jobs": bodies(10)}, {"Idempotency-Key": "batch-once"}
    first = await (await alice.call("POST", "/v1/jobs/batch", json=body, headers=headers)).json()
    again = await (await alice.call("POST", "/v1/jobs/batch", json=body, headers=headers)).json()
    assert (first["created"], again["created"], again["replayed"]) == (10, 0, 10)
    assert [i["job"]["id"] for i in again["items"]] == [i["job"]["id"] for i in first["items"]]
    assert all(item["replayed"] for item in again["items"])
    assert len(await listed_ids(alice)) == 10
    other = await (
        await alice.call("POST", "/v1/jobs/batch", json={"jobs": bodies(10)}, headers=headers)
    ).json()  # another batch (other instants) under the same key
    assert other["failed"] == 10
    assert {item["problem"]["field"] for item in other["items"]} == {"Idempotency-Key"}
    assert len(await listed_ids(alice)) == 10


class FailsSomeBatches:
    """The API's store, except that the batches writing the first runs of the given jobs fail twice (Cassandra timed
    out after the job's conditional insert, and again when the create sent its rows once more)."""

    def __init__(self, store: CassandraStore) -> None:
        self._store = store
        self.names: set[str] = set()  # job ids, as text
        self._failed: set[str] = set()  # those whose batch failed once already

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def batch(self, statements: Any, *, logged: bool = True) -> None:
        self._fail_once(statements)
        await self._store.batch(statements, logged=logged)

    async def grouped_batch(self, statements: Any, *, logged: bool = True) -> None:
        """A create's rows fail as if their group's batch timed out (a group of that create alone)."""
        self._fail_once(statements)
        await self._store.grouped_batch(statements, logged=logged)

    def _fail_once(self, statements: Any) -> None:
        text = repr(statements)
        hit = next((n for n in self.names if n in text), None)
        if hit is not None:
            if hit in self._failed:
                self.names.discard(hit)
            self._failed.add(hit)
            raise Unavailable("Cassandra batch timed out (injected)")


async def test_items_that_failed_are_completed_by_sending_the_batch_again(
    make_client: Callable[..., Awaitable[TestClient]],
    make_tenant: Callable[..., Awaitable[Caller]],
    store: CassandraStore,
) -> None:
    now = [datetime.now(UTC)]
    jobs = bodies(6)
    flaky = FailsSomeBatches(store)
    client = await make_client(clock=lambda: now[0], store_=flaky)
    alice = await make_tenant(client)
    headers = {"Idempotency-Key": "batch-partial"}
    flaky.names = {str(uuid.uuid5(KEYED_JOBS, f"{alice.tenant_id}\nbatch-partial\nbatch item {i}")) for i in (2, 4)}
    first = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": jobs}, headers=headers)).json()
    assert [item["status"] for item in first["items"]] == [201, 201, 503, 201, 503, 201]
    assert first["items"][2]["problem"]["detail"] == "Cassandra is unavailable; try again later"
    now[0] += timedelta(seconds=11)  # past the store's timeout: the first request is surely over
    again = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": jobs}, headers=headers)).json()
    assert [item["status"] for item in again["items"]] == [201] * 6
    assert again["replayed"] == 6  # every job was made by the first request; two are completed now
    for item in again["items"]:
        run = await runs.get_run(store, uuid.UUID(item["job"]["next_run_id"]))
        assert run is not None and run.status == "SCHEDULED"
    assert len(await listed_ids(alice)) == 6


async def test_items_past_the_job_quota_are_refused_in_order_and_the_slots_not_used_are_given_back(
    make_client: Callable[..., Awaitable[TestClient]], make_tenant: Callable[..., Awaitable[Caller]]
) -> None:
    alice = await make_tenant(await make_client(max_jobs_per_tenant=4))
    jobs = bodies(6)
    jobs[0]["schedule"] = {"type": "cron", "expr": "not a cron"}  # refused before the quota: takes no slot
    result = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": jobs})).json()
    assert [item["status"] for item in result["items"]] == [422, 201, 201, 201, 201, 422]
    assert result["items"][5]["problem"]["title"] == "Job quota exceeded"
    again = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": bodies(1)})).json()
    assert [item["status"] for item in again["items"]] == [422]
    created = result["items"][1]["job"]["id"]
    assert (await alice.call("DELETE", f"/v1/jobs/{created}")).status == 204
    last = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": bodies(2)})).json()
    assert [item["status"] for item in last["items"]] == [201, 422]  # one slot free: the delete's, none leaked


async def test_a_keyed_batch_sent_again_at_the_job_quota_answers_its_replays(
    make_client: Callable[..., Awaitable[TestClient]], make_tenant: Callable[..., Awaitable[Caller]]
) -> None:
    alice = await make_tenant(await make_client(max_jobs_per_tenant=2))
    jobs, headers = bodies(3), {"Idempotency-Key": "batch-at-quota"}
    first = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": jobs}, headers=headers)).json()
    assert [item["status"] for item in first["items"]] == [201, 201, 422]  # the third past the quota
    again = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": jobs}, headers=headers)).json()
    assert [item["status"] for item in again["items"]] == [201, 201, 422]
    assert [item.get("replayed") for item in again["items"][:2]] == [True, True]
    assert [item["job"]["id"] for item in again["items"][:2]] == [item["job"]["id"] for item in first["items"][:2]]
    assert again["items"][2]["problem"]["title"] == "Job quota exceeded"


async def test_a_replayed_batch_gives_back_the_job_slots_it_took(
    make_client: Callable[..., Awaitable[TestClient]], make_tenant: Callable[..., Awaitable[Caller]]
) -> None:
    alice = await make_tenant(await make_client(max_jobs_per_tenant=4))
    jobs, headers = bodies(2), {"Idempotency-Key": "batch-slots"}
    for _ in range(2):  # made, then replayed: the replay takes two slots (the quota comes first) and gives them back
        result = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": jobs}, headers=headers)).json()
        assert [item["status"] for item in result["items"]] == [201, 201]
    assert result["replayed"] == 2
    last = await (await alice.call("POST", "/v1/jobs/batch", json={"jobs": bodies(3)})).json()
    assert [item["status"] for item in last["items"]] == [201, 201, 422]
