"""Bad input is a 4xx problem+json naming the field; probes, metrics, quotas and the OpenAPI document."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from api.meta import openapi_document
from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller, problem_of


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (cron_job(delayToleranceS="soon"), "delayToleranceS"),
        (cron_job(surprise=1), "surprise"),
        (cron_job(target={"type": "http", "url": "https://x.io", "verb": "GET"}), "target.verb"),
        (cron_job(schedule={"type": "cron", "expr": "61 * * * *", "tz": "UTC"}), "schedule.expr"),
        (cron_job(schedule={"type": "cron", "expr": "0 9 * * *", "tz": "Mars/Olympus"}), "schedule.tz"),
        (cron_job(schedule={"type": "cron", "expr": "* * * * * *", "tz": "UTC"}), "schedule.expr"),
        (cron_job(schedule={"type": "cron", "expr": "² * * * *", "tz": "UTC"}), "schedule.expr"),
        (cron_job(schedule={"type": "cron", "expr": "0 0 " + "1," * 5000 + "1 * *", "tz": "UTC"}), "schedule.expr"),
        (cron_job(schedule={"type": "interval", "everyS": 5}), "schedule.everyS"),
        (cron_job(schedule={"type": "once", "runAt": "tomorrow"}), "schedule.runAt"),
        (cron_job(schedule={"type": "once", "runAt": "2030-01-01T09:00:00"}), "schedule.runAt"),
        (cron_job(target={"type": "http", "url": "ftp://x.io/a"}), "target.url"),
        (cron_job(target={"type": "http", "url": "https://user:pw@x.io/a"}), "target.url"),
        (cron_job(target={"type": "http", "url": "https:///nohost"}), "target.url"),
        (
            cron_job(target={"type": "http", "url": "https://x.io", "headers": {"X-A": "a\r\nEvil: 1"}}),
            "target.headers.X-A",
        ),
        (
            cron_job(target={"type": "http", "url": "https://x.io", "headers": {"Bad Name": "v"}}),
            "target.headers.Bad Name",
        ),
        (cron_job(target={"type": "kafka", "topic": "no spaces allowed"}), "target.topic"),
        (cron_job(retryPolicy={"maxAttempts": 0}), "retryPolicy.maxAttempts"),
        (cron_job(priority="asap"), "priority"),
        (cron_job(payloadBase64="***"), "payloadBase64"),
        (cron_job(labels={"team": 5}), "labels"),
    ],
)
async def test_bad_job_bodies_are_422_naming_the_field(alice: Caller, body: dict[str, Any], field: str):
    problem = await problem_of(await alice.call("POST", "/v1/jobs", json=body), 422)
    assert problem["field"] == field, problem


async def test_malformed_json_is_400_and_an_empty_or_non_object_body_is_4xx(alice: Caller):
    await problem_of(await alice.call("POST", "/v1/jobs", data=b'{"schedule": '), 400)
    await problem_of(await alice.call("POST", "/v1/jobs", data=b""), 400)
    await problem_of(await alice.call("POST", "/v1/jobs", json=[1, 2]), 422)


async def test_an_oversized_payload_is_413(alice: Caller, make_client: Any, make_tenant: Any):
    small = await make_tenant(await make_client(max_payload_bytes=1024))
    response = await small.call("POST", "/v1/jobs", json=cron_job(payload={"blob": "x" * 2000}))
    assert (await problem_of(response, 413))["field"] == "payload"
    encoded = base64.b64encode(b"x" * 2000).decode()
    bytes_response = await small.call("POST", "/v1/jobs", json=cron_job(payload=None, payloadBase64=encoded))
    await problem_of(bytes_response, 413)
    await problem_of(await small.call("POST", "/v1/jobs", data=b"x" * 200_000), 413)


@pytest.mark.parametrize("keyed", [False, True])
async def test_a_payload_near_the_limit_is_created_whole(alice: Caller, keyed: bool):
    """A payload just under `api.max_payload_bytes` is stored, with its audit row, in one batch (it used to exceed
    Cassandra's default batch size limit above ~25 KiB: a 500, and with a key a job row without its run)."""
    blob = "x" * (250 * 1024)
    headers = {"Idempotency-Key": f"near-limit-{uuid.uuid4()}"} if keyed else {}
    response = await alice.call("POST", "/v1/jobs", json=cron_job(payload={"blob": blob}), headers=headers)
    assert response.status == 201, await response.text()
    job = await response.json()
    read = await alice.call("GET", f"/v1/jobs/{job['id']}")
    assert read.status == 200 and (await read.json())["payload"] == {"blob": blob}


async def test_a_definition_above_the_stores_batch_limit_is_a_413_naming_payload_or_keyed_created_whole(
    make_client: Any, make_tenant: Any
):
    """A definition whose create batch is above the nodes' `batch_size_fail_threshold` (the stack's: 1 MiB; here a
    payload limit raised past it): keyless, the one logged batch is refused whole, a 413 naming `payload` with
    nothing written (it was a 500); keyed, the rows after the job's insert go one statement each instead of
    leaving a job row without its run (it was a 500 and such a job)."""
    tenant = await make_tenant(await make_client(max_payload_bytes=1400 * 1024))
    blob = "x" * (1200 * 1024)
    refused = await tenant.call("POST", "/v1/jobs", json=cron_job(payload={"blob": blob}))
    assert (await problem_of(refused, 413))["field"] == "payload"
    assert (await (await tenant.call("GET", "/v1/jobs")).json())["items"] == []
    keyed = {"Idempotency-Key": f"large-{uuid.uuid4()}"}
    created = await tenant.call("POST", "/v1/jobs", json=cron_job(payload={"blob": blob}), headers=keyed)
    assert created.status == 201, await created.text()
    job = await created.json()
    run = await tenant.call("GET", f"/v1/runs/{job['next_run_id']}")
    assert run.status == 200, await run.text()
    assert [item["id"] for item in (await (await tenant.call("GET", "/v1/jobs")).json())["items"]] == [job["id"]]
    read = await tenant.call("GET", f"/v1/jobs/{job['id']}")
    assert (await read.json())["payload"] == {"blob": blob}


async def test_base64_payloads_are_kept_as_bytes(alice: Caller):
    encoded = base64.b64encode(b"\x00\x01binary").decode()
    response = await alice.call("POST", "/v1/jobs", json=cron_job(payload=None, payloadBase64=encoded))
    job = await response.json()
    assert response.status == 201 and job["payloadBase64"] == encoded and "payload" not in job


@pytest.mark.parametrize("query", ["limit=0", "limit=100000", "limit=-1", "limit=abc", "state=GONE", "label=novalue"])
async def test_absurd_list_parameters_are_422(alice: Caller, query: str):
    await problem_of(await alice.call("GET", f"/v1/jobs?{query}"), 422)


async def test_unknown_ids_are_404_and_missing_keys_401(alice: Caller, client: Any):
    await problem_of(await alice.call("GET", "/v1/jobs/not-a-uuid"), 404)
    await problem_of(await alice.call("GET", "/v1/runs/00000000-0000-0000-0000-000000000000"), 404)
    await problem_of(await client.get("/v1/jobs"), 401)
    await problem_of(await client.get("/v1/jobs", headers={"Authorization": "Bearer tw_nope"}), 401)


async def test_the_request_rate_quota_answers_429_with_retry_after(make_client: Any, make_tenant: Any):
    tenant = await make_tenant(await make_client(requests_per_s=3))
    statuses = [(await tenant.call("GET", "/v1/jobs")).status for _ in range(8)]
    assert 429 in statuses and statuses[0] == 200
    limited = await tenant.call("GET", "/v1/jobs")
    if limited.status == 429:
        assert int(limited.headers["Retry-After"]) >= 1


async def test_the_job_count_quota_answers_422(make_client: Any, make_tenant: Any):
    tenant = await make_tenant(await make_client(max_jobs_per_tenant=2))
    assert [(await tenant.call("POST", "/v1/jobs", json=cron_job())).status for _ in range(2)] == [201, 201]
    await problem_of(await tenant.call("POST", "/v1/jobs", json=cron_job()), 422)


async def test_a_keyed_create_replayed_at_the_job_quota_answers_its_replay_and_a_new_key_the_quota(
    make_client: Any, make_tenant: Any
):
    tenant = await make_tenant(await make_client(max_jobs_per_tenant=1))
    body, headers = cron_job(), {"Idempotency-Key": f"at-quota-{uuid.uuid4()}"}
    created = await tenant.call("POST", "/v1/jobs", json=body, headers=headers)
    assert created.status == 201
    replayed = await tenant.call("POST", "/v1/jobs", json=body, headers=headers)  # the tenant is at its limit now
    assert replayed.status == 201, await replayed.text()
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert (await replayed.json())["id"] == (await created.json())["id"]
    other = await tenant.call("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": f"new-{uuid.uuid4()}"})
    assert (await problem_of(other, 422))["title"] == "Job quota exceeded"
    changed = await tenant.call("POST", "/v1/jobs", json=cron_job(name="another"), headers=headers)
    assert (await problem_of(changed, 422))["field"] == "Idempotency-Key"  # the key with another body: as ever


async def test_creates_that_make_no_job_give_back_the_slot_their_rate_check_took(make_client: Any, make_tenant: Any):
    tenant = await make_tenant(await make_client(max_jobs_per_tenant=2))
    body, headers = cron_job(), {"Idempotency-Key": f"slots-{uuid.uuid4()}"}
    assert (await tenant.call("POST", "/v1/jobs", json=body, headers=headers)).status == 201  # seeds the counter
    for _ in range(3):  # refused bodies, before and after parsing, and replays: each took a slot and gave it back
        await problem_of(await tenant.call("POST", "/v1/jobs", json={"target": 1}), 422)
        await problem_of(
            await tenant.call("POST", "/v1/jobs", data=b"{", headers={"Content-Type": "application/json"}), 400
        )
        assert (await tenant.call("POST", "/v1/jobs", json=body, headers=headers)).headers[
            "Idempotent-Replayed"
        ] == "true"
    assert (await tenant.call("POST", "/v1/jobs", json=cron_job())).status == 201  # the second job of two
    await problem_of(await tenant.call("POST", "/v1/jobs", json=cron_job()), 422)


async def test_a_cron_more_frequent_than_the_minimum_interval_is_422(make_client: Any, make_tenant: Any):
    tenant = await make_tenant(await make_client(min_interval_s=3600))
    body = cron_job(schedule={"type": "cron", "expr": "*/30 * * * *", "tz": "UTC"})
    assert (await problem_of(await tenant.call("POST", "/v1/jobs", json=body), 422))["field"] == "schedule.expr"


async def test_probes_metrics_and_the_openapi_document(client: Any):
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    metrics = await client.get("/metrics")
    assert metrics.status == 200 and "tickwheel_api_requests_total" in await metrics.text()
    served = await (await client.get("/v1/openapi.json")).json()
    assert served["openapi"].startswith("3.1") and served == openapi_document()


def test_every_route_is_documented_and_every_documented_route_exists():
    from aiohttp import web

    from api.app import ROUTE_TABLES

    app = web.Application()
    for table in ROUTE_TABLES:
        app.add_routes(table)
    routes = {  # "*" is a catch-all answering 405 (/v1/jobs/batch would otherwise be read as a job id)
        (r.resource.canonical, r.method.lower())
        for r in app.router.routes()
        if r.method not in ("HEAD", "*") and r.resource
    }
    documented = {
        (path, method)
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method in ("get", "post", "patch", "delete", "put")
    }
    assert routes == documented


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"maxConcurrency": -1}, "target.maxConcurrency"),
        ({"ratePerS": 0}, "target.ratePerS"),
        ({"timeoutS": 0.000001}, "target.timeoutS"),
        ({"headers": {"Transfer-Encoding": "chunked"}}, "target.headers.Transfer-Encoding"),
        ({"headers": {"Host": "internal"}}, "target.headers.Host"),
        ({"headers": {"webhook-signature": "v1,forged"}}, "target.headers.webhook-signature"),
        ({"headers": {"X-Tickwheel-Attempt": "1"}}, "target.headers.X-Tickwheel-Attempt"),
        ({"headers": {"X-A": "a\x0bb"}}, "target.headers.X-A"),
        ({"headers": {"X-A": "a\x7fb"}}, "target.headers.X-A"),
    ],
)
async def test_hostile_http_targets_are_422_naming_the_field(alice: Caller, target: dict[str, Any], field: str):
    body = cron_job(target={"type": "http", "url": "https://example.com/hook", **target})
    assert (await problem_of(await alice.call("POST", "/v1/jobs", json=body), 422))["field"] == field


async def test_positive_flow_limits_are_accepted_and_returned(alice: Caller):
    target = {"type": "http", "url": "https://example.com/hook", "maxConcurrency": 2, "ratePerS": 0.5}
    response = await alice.call("POST", "/v1/jobs", json=cron_job(target=target))
    assert response.status == 201, await response.text()
    job = await response.json()
    assert job["target"]["maxConcurrency"] == 2 and job["target"]["ratePerS"] == 0.5


async def test_a_kafka_topic_must_be_under_the_tenants_own_prefix(store: Any, make_tenant: Any):
    acme, acme2 = await make_tenant(), await make_tenant()
    for tenant, prefix in ((acme, "acme."), (acme2, "acme2.")):
        await store.execute("UPDATE tenants SET kafka_topic_prefix = ? WHERE tenant_id = ?", [prefix, tenant.tenant_id])
    mine = await acme.call("POST", "/v1/jobs", json=cron_job(target={"type": "kafka", "topic": "acme.orders"}))
    assert mine.status == 201, await mine.text()
    for topic in ("acme2.orders", "acme", "tickwheel.runs.default"):
        foreign = await acme.call("POST", "/v1/jobs", json=cron_job(target={"type": "kafka", "topic": topic}))
        assert (await problem_of(foreign, 422))["field"] == "target.topic"


async def test_json_nested_a_thousand_deep_is_422_naming_the_field(alice: Caller):
    body = b'{"schedule": {"type": "cron", "expr": "0 9 * * *"}, "target": {"type": "http", "url": "https://e.io"}, '
    body += b'"payload": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    response = await alice.call("POST", "/v1/jobs", data=body, headers={"Content-Type": "application/json"})
    assert (await problem_of(response, 422))["field"] == "payload"


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"type": "once", "runAt": "9999-12-31T23:59:59-14:00"}, "schedule.runAt"),
        ({"type": "interval", "everyS": 3600, "startAt": "9999-12-31T20:00:00Z"}, "schedule.startAt"),
    ],
)
async def test_instants_near_year_9999_are_422_naming_the_field(alice: Caller, schedule: Any, field: str):
    response = await alice.call("POST", "/v1/jobs", json=cron_job(schedule=schedule))
    assert (await problem_of(response, 422))["field"] == field


async def test_the_payload_limit_counts_bytes(make_client: Any, make_tenant: Any):
    small = await make_tenant(await make_client(max_payload_bytes=1024))
    response = await small.call("POST", "/v1/jobs", json=cron_job(payload={"blob": "\u00e9" * 600}))  # 1200+ bytes
    assert (await problem_of(response, 413))["field"] == "payload"
