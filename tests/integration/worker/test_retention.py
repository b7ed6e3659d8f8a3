"""A dead letter the worker writes is kept for its tenant's retention (the settings' default otherwise)."""

from __future__ import annotations

import dataclasses

from schemas.messages import HttpTarget
from tests.integration.worker.conftest import Scene, eventually
from tickwheel.core.retention import DAY_S
from tickwheel.store.tenants import TenantChange, change_tenant


async def letter_ttls(scene: Scene) -> list[int]:
    rows = await scene.store.execute(
        "SELECT TTL(last_error) AS ttl FROM dead_letters WHERE tenant_id = ?", [scene.tenant]
    )
    return [r["ttl"] for r in rows]


async def test_a_dead_letter_lives_for_the_tenants_retention(scene: Scene) -> None:
    await change_tenant(scene.store, scene.tenant, TenantChange(retention_days=3))
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/gone", status=410)))
    await scene.wait_status(run.run_id, "DEAD")
    ttls = await eventually(lambda: letter_ttls(scene), bool)
    assert 3 * DAY_S - 60 <= ttls[0] <= 3 * DAY_S


async def test_without_an_override_a_dead_letter_lives_for_the_settings_default(scene: Scene) -> None:
    retention = dataclasses.replace(scene.settings.retention, dead_letters_days=11)  # not the table's 30 days
    scene.settings = dataclasses.replace(scene.settings, retention=retention)
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/gone", status=410)))
    await scene.wait_status(run.run_id, "DEAD")
    ttls = await eventually(lambda: letter_ttls(scene), bool)
    default_s = 11 * DAY_S
    assert default_s - 60 <= ttls[0] <= default_s
