"""Fair share between tenants inside a lane, on the real servers: a small tenant's runs that arrive behind a big
tenant's backlog in the topic are started before the backlog drains (counted in call order, not timed)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from schemas.messages import HttpTarget, encode, topic_names
from tests.integration.worker.conftest import Scene, now_utc
from tickwheel.signing import generate_secret
from tickwheel.store.buckets import due_run_for
from tickwheel.store.runs import NewRun

BIG = 200
SMALL = 10
SLOTS = 2


async def backlog_then_small_tenant(scene: Scene) -> None:
    """Tenant A's BIG runs, then tenant B's SMALL ones, produced in that order before any worker reads the lane.
    Their runs are due in an hour, so the scene's firer leaves them alone: this test is the only one firing them."""
    small_tenant = f"{scene.tenant}-b"
    await scene.store.execute(
        "INSERT INTO tenants (tenant_id, name, signing_secrets, created_at) VALUES (?, ?, ?, ?)",
        [small_tenant, small_tenant, [generate_secret()], now_utc()],
    )
    later = now_utc() + timedelta(hours=1)
    big = await asyncio.gather(*(scene.job(HttpTarget(url=scene.sink.url("/a")), at=later) for _ in range(BIG)))
    other = dataclasses.replace(scene, tenant=small_tenant)
    small = await asyncio.gather(*(other.job(HttpTarget(url=scene.sink.url("/b")), at=later) for _ in range(SMALL)))
    await produce_in_order(scene, [*big, *small])


async def produce_in_order(scene: Scene, made: list[NewRun]) -> None:
    topic = topic_names(scene.settings.kafka.topic_prefix)["default"]
    for run in made:
        await scene.producer.send(topic, encode(due_run_for(run)))


def paths_in_arrival_order(scene: Scene) -> list[str]:
    return [call.path for call in scene.sink.arrivals]


async def start_worker(scene: Scene, readahead: int) -> None:
    await scene.worker(
        concurrency_default=SLOTS, fair_share_readahead=readahead, target_rate_per_s=1e6, target_concurrency=1000
    )


async def test_a_small_tenants_runs_start_before_a_big_tenants_backlog_drains(scene: Scene) -> None:
    await backlog_then_small_tenant(scene)
    await start_worker(scene, readahead=1000)
    await scene.sink.wait_for("/b", SMALL, timeout_s=60)
    order = paths_in_arrival_order(scene)
    b_positions = [n for n, path in enumerate(order) if path == "/b"]
    # Deficit round robin alternates A and B once both are queued: B's last call is within a few of 2 x SMALL,
    # plus the slots and the A runs started before the first poll had reached B's messages.
    assert len(b_positions) == SMALL and b_positions[-1] < 2 * SMALL + 30, order[: b_positions[-1] + 1]
    await scene.sink.wait_for("/a", BIG, timeout_s=120)


async def test_without_fair_share_the_small_tenant_waits_behind_the_backlog(scene: Scene) -> None:
    await backlog_then_small_tenant(scene)
    await start_worker(scene, readahead=0)
    await scene.sink.wait_for("/b", SMALL, timeout_s=120)
    order = paths_in_arrival_order(scene)
    assert order.count("/a") >= BIG - SLOTS, "arrival order: B's runs start only once A's backlog has been started"
