"""A dead letter the worker writes is kept for its tenant's retention (the settings' default otherwise), and so is
every run row it writes (claims, outcomes, attempts, lease expiries)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from schemas.messages import HttpTarget
from tests.integration.worker.conftest import Scene, eventually
from tickwheel.core.retention import DAY_S
from tickwheel.store import runs
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


SLACK_S = 120  # the worker's clock at the write vs this test's at the read, on a loaded box
AHEAD_S = 30  # the lapsed run's occurrence is this far ahead (so only its lease check fires it)
LATER_S = 120  # a claim's cells are kept past its lease (60 s here), a lapsed run's past its occurrence


def within_retention(ttl: int | None, days: int) -> bool:
    """A TTL read now of a row written in the last minutes, kept `days` past a due time already passed."""
    return ttl is not None and days * DAY_S - SLACK_S <= ttl <= days * DAY_S + LATER_S


async def attempt_kinds(scene: Scene, run_id: uuid.UUID) -> list[str]:
    return [a["kind"] for a in await scene.store.execute("SELECT kind FROM run_attempts WHERE run_id = ?", [run_id])]


async def dead_at_ttl(scene: Scene, run_id: uuid.UUID) -> int | None:
    [row] = await scene.store.execute("SELECT TTL(dead_at) AS ttl FROM runs WHERE run_id = ?", [run_id])
    ttl: int | None = row["ttl"]
    return ttl


@pytest.mark.parametrize("days", [3, 90])
async def test_every_run_row_the_worker_writes_lives_for_the_tenants_run_retention(scene: Scene, days: int) -> None:
    await change_tenant(scene.store, scene.tenant, TenantChange(retention_days=days))
    await scene.worker()
    retried = await scene.job(HttpTarget(url=scene.sink.url("/gone", status=500)))  # RETRY, RETRY, DEAD
    lapsed = await scene.job(HttpTarget(url=scene.sink.url("/ok")), at=datetime.now(UTC) + timedelta(seconds=AHEAD_S))
    now = datetime.now(UTC)  # a worker that died holding `lapsed`: its lease check times it out into a retry
    assert (await runs.claim(scene.store, lapsed, 0, "gone", now - timedelta(seconds=1), now)).applied
    await scene.wait_status(retried.run_id, "DEAD")
    await scene.wait_status(lapsed.run_id, "SUCCEEDED")
    # The attempt rows follow the outcome's LWT: wait for all of them.
    assert await eventually(lambda: attempt_kinds(scene, retried.run_id), lambda k: len(k) == 3) == ["call"] * 3
    assert await eventually(lambda: attempt_kinds(scene, lapsed.run_id), lambda k: len(k) == 2) == [
        "lease_expired", "call",
    ]  # fmt: skip
    for run in (retried, lapsed):
        [row] = await scene.store.execute(
            "SELECT TTL(status) AS status, TTL(worker) AS worker, TTL(finished_at) AS finished FROM runs"
            " WHERE run_id = ?", [run.run_id],
        )  # fmt: skip
        assert all(within_retention(row[column], days) for column in ("status", "worker", "finished")), row
        [history] = await scene.store.execute(
            "SELECT TTL(status) AS ttl FROM runs_by_job WHERE job_id = ?", [run.job_id]
        )
        assert within_retention(history["ttl"], days), history
        attempts = await scene.store.execute(
            "SELECT kind, TTL(outcome) AS ttl FROM run_attempts WHERE run_id = ?", [run.run_id]
        )
        assert attempts and all(within_retention(a["ttl"], days) for a in attempts), attempts
    dead_ttl = await eventually(lambda: dead_at_ttl(scene, retried.run_id), lambda ttl: ttl is not None)  # after DEAD
    assert within_retention(dead_ttl, days), "the run's retention, not the dead letter's"
