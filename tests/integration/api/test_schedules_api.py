"""Issue 17 through the HTTP API on the real servers: payload templates, trigger now, named jobs."""

from __future__ import annotations

from typing import Any

from tests.integration.api.api_bodies import cron_job
from tests.integration.api.conftest import Caller


async def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"].startswith("application/problem+json")
    body: dict[str, Any] = await response.json()
    return body


async def test_a_templated_payload_is_stored_and_a_template_that_does_not_parse_is_a_422_naming_its_path(
    alice: Caller,
):
    templated = cron_job(payload={"day": "{{scheduled_at_local}}", "n": 1}, payloadTemplate=True)
    created = await alice.call("POST", "/v1/jobs", json=templated)
    assert created.status == 201, await created.text()
    job = await created.json()
    assert job["payloadTemplate"] is True and job["payload"] == {"day": "{{scheduled_at_local}}", "n": 1}
    bad = cron_job(payload={"a": {"b": ["{{scheduled_at}", "x"]}}, payloadTemplate=True)
    assert (await problem(await alice.call("POST", "/v1/jobs", json=bad), 422))["field"] == "payload.a.b[0]"
    unknown = cron_job(payload={"env": "{{secret_key}}"}, payloadTemplate=True)
    assert (await problem(await alice.call("POST", "/v1/jobs", json=unknown), 422))["field"] == "payload.env"
    base64 = cron_job(payload=None, payloadBase64="e30=", payloadTemplate=True)
    assert (await problem(await alice.call("POST", "/v1/jobs", json=base64), 422))["field"] == "payloadTemplate"
    # not opted in: braces are plain text
    plain = await alice.call("POST", "/v1/jobs", json=cron_job(payload={"env": "{{secret_key}}"}))
    assert plain.status == 201
