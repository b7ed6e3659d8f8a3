"""A call's outcome whose write Cassandra does not take (a node leaving or rejoining: tens of seconds of timeouts in
the soak) is written again with backoff until the claim's lease ends, not given up after a few seconds and left
to the lease check a minute later."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest

from tests.unit.worker.test_pipeline_decisions import NOW, Scene
from tickwheel.errors import Unavailable
from tickwheel.flow.limits import FlowLimits
from tickwheel.store.buckets import due_run_for
from tickwheel.store.memory import MemoryStore
from tickwheel.store.records import RunStatus
from worker.pipeline import RunHandler
from worker.targets import HttpCaller, KafkaCaller


class TimingOutStore(MemoryStore):
    """The in-memory store whose outcome write times out `failures` times first."""

    failures = 0
    tries = 0

    async def finish(self, *args: Any, **kwargs: Any) -> bool:
        self.tries += 1
        if self.failures > 0:
            self.failures -= 1
            raise Unavailable("Cassandra did not answer: WriteTimeout")
        return await super().finish(*args, **kwargs)


def handler_on(scene: Scene, waits: list[float]) -> RunHandler:
    async def sleep(seconds: float) -> None:  # the test's time: a wait moves the clock
        waits.append(seconds)
        scene.now += timedelta(seconds=seconds)

    return RunHandler(
        scene.settings, scene.store, cast(FlowLimits, None), cast(HttpCaller, scene.target), cast(KafkaCaller, None),
        "w1", announcer=scene.announcer, clock=lambda: scene.now, rand=lambda: 0.5, sleep=sleep,
    )  # fmt: skip


def scene_with(failures: int) -> Scene:
    scene = Scene()
    store = TimingOutStore()
    store.tenants = scene.store.tenants
    store.failures = failures
    scene.store = store
    return scene


async def test_an_outcome_write_timing_out_for_half_a_minute_is_recorded_within_the_lease() -> None:
    scene = scene_with(failures=8)
    run = await scene.due_run()
    waits: list[float] = []
    await handler_on(scene, waits).handle(due_run_for(run))
    assert scene.status(run) == (RunStatus.SUCCEEDED, 1) and scene.target.calls == 1
    assert cast(TimingOutStore, scene.store).tries == 9
    assert sum(waits) < scene.settings.worker.lease_s and max(waits) <= 5.0


async def test_an_outcome_write_failing_past_the_lease_is_given_up_to_the_lease_check() -> None:
    scene = scene_with(failures=1000)
    run = await scene.due_run()
    waits: list[float] = []
    with pytest.raises(Unavailable):
        await handler_on(scene, waits).handle(due_run_for(run))
    assert scene.now >= NOW + timedelta(seconds=scene.settings.worker.lease_s)
    assert scene.status(run) == (RunStatus.RUNNING, 1)
