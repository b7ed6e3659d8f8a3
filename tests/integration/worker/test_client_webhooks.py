"""A receiver using tickwheel_client.webhooks.verify accepts the calls the real worker makes, with either secret
while the tenant's signing secret is being rotated, and refuses them with any other secret or a changed body."""

from __future__ import annotations

import pytest

from schemas.messages import HttpTarget
from tests.integration.worker.conftest import Scene
from tickwheel.signing import generate_secret
from tickwheel_client.webhooks import InvalidSignature, verify


async def test_the_workers_real_calls_verify_with_the_old_and_the_new_secret_during_a_rotation(scene: Scene) -> None:
    old, new = scene.secrets[0], generate_secret()
    await scene.store.execute(  # a rotation under way: the newest secret first, the old one still signing
        "UPDATE tenants SET signing_secrets = ? WHERE tenant_id = ?", [[new, old], scene.tenant]
    )
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/hook")), payload='{"report": "daily"}')
    [call] = await scene.sink.wait_for("/hook", 1)
    headers = {name: call.header(name) or "" for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    assert len(headers["webhook-signature"].split()) == 2
    assert verify(headers, call.body, [old]).msg_id == str(run.run_id)
    assert verify(headers, call.body, new).msg_id == str(run.run_id)
    with pytest.raises(InvalidSignature):
        verify(headers, call.body, [generate_secret()])
    with pytest.raises(InvalidSignature):
        verify(headers, call.body.replace(b"daily", b"weekly"), [old, new])
