"""The whole platform through its public API: runs across tenants reach a sink once, on time, signed, and
never at another tenant's endpoint."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp

from tickwheel.core.ids import run_id_for
from tickwheel.dev.checker import Call, Expected, check
from tickwheel.dev.sink import Sink, SinkCall
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

TENANTS = 3
ONCE_PER_TENANT = 12
INTERVAL_S = 10


def standard_webhooks_valid(secret: str, call: SinkCall) -> bool:
    """An independent Standard Webhooks check: HMAC-SHA256 over `id.timestamp.body` with the whsec_ key."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, stamp = call.header("webhook-id"), call.header("webhook-timestamp")
    if not (msg_id and stamp and call.header("webhook-signature")):
        return False
    digest = hmac.new(key, f"{msg_id}.{stamp}.".encode() + call.body, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(digest).decode()
    return expected in (call.header("webhook-signature") or "").split()


def run_id_of(call: SinkCall) -> uuid.UUID | None:
    """The run a call is for (its webhook-id); None for anything else that reached the sink."""
    try:
        return uuid.UUID(call.header("webhook-id") or "")
    except ValueError:
        return None


DELIVERY_DEADLINE = timedelta(seconds=60)  # after the window: a loaded box delivers late, not never


async def delivered_or_deadline(sink: Sink, run_ids: set[uuid.UUID], deadline: datetime) -> None:
    """Until the sink was called for every run (the check then reports what is missing as lost), or the deadline."""
    while datetime.now(UTC) < deadline:
        if run_ids <= {run_id_of(c) for c in sink.calls}:
            return
        await asyncio.sleep(0.5)


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def create(http: aiohttp.ClientSession, api: str, key: str, body: dict[str, object]) -> dict[str, str]:
    async with http.post(f"{api}/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"}) as answer:
        document = await answer.json()
        assert answer.status == 201, document
        return document  # type: ignore[no-any-return]


async def test_runs_across_tenants_are_delivered_once_on_time_and_signed(
    platform: object, sink: Sink, store: CassandraStore, settings: Settings
) -> None:
    api = platform.api_url  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    tenants = [await create_tenant(store, f"e2e-{uuid.uuid4().hex[:8]}", now) for _ in range(TENANTS)]
    secrets = {t.tenant_id: t.signing_secrets[0] for t, _ in tenants}
    expected: list[Expected] = []
    intervals: list[tuple[str, uuid.UUID, datetime]] = []
    async with aiohttp.ClientSession() as http:
        for tenant, key in tenants:
            for i in range(ONCE_PER_TENANT):
                due = now + timedelta(seconds=6 + i * 1.5)
                job = await create(http, api, key, {
                    "schedule": {"type": "once", "runAt": due.isoformat()},
                    "target": {"type": "http", "url": sink.url(f"/{tenant.tenant_id}/once")},
                    "payload": {"i": i},
                })  # fmt: skip
                scheduled = parse(job["next_run_at"])
                expected.append(Expected(run_id_for(uuid.UUID(job["id"]), scheduled), tenant.tenant_id, scheduled))
            job = await create(http, api, key, {
                "schedule": {"type": "interval", "everyS": INTERVAL_S},
                "target": {"type": "http", "url": sink.url(f"/{tenant.tenant_id}/interval")},
                "priority": "urgent",
            })  # fmt: skip
            intervals.append((tenant.tenant_id, uuid.UUID(job["id"]), parse(job["next_run_at"])))
    window_end = now + timedelta(seconds=6 + ONCE_PER_TENANT * 1.5 + 3 * INTERVAL_S)
    for tenant_id, job_id, first in intervals:
        at = first
        while at <= window_end:
            expected.append(Expected(run_id_for(job_id, at), tenant_id, at))
            at += timedelta(seconds=INTERVAL_S)
    await delivered_or_deadline(sink, {e.run_id for e in expected}, window_end + DELIVERY_DEADLINE)

    calls = [
        Call(
            run_id=run_id_of(c),
            tenant=c.path.split("/")[1],
            received_at=datetime.fromtimestamp(c.received_at, UTC),
            status=c.status or 0,
            signature_valid=standard_webhooks_valid(secrets.get(c.path.split("/")[1], "whsec_"), c),
        )
        for c in sink.calls
    ]
    report = check(expected, calls, now=window_end)
    print(report.summary())
    assert report.expected >= TENANTS * (ONCE_PER_TENANT + 3)
    assert report.lost == [], report.summary()
    assert report.early == [], report.summary()
    assert report.cross_tenant == 0 and report.invalid_signatures == 0, report.summary()
