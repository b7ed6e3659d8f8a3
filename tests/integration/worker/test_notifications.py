"""Run-event notifications on the real servers: the events a job asked for reach its URL signed, with their own
retries, through the egress policy, and a slow notification URL never holds a run back."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import timedelta
from typing import Any

import msgspec

from schemas.messages import HttpTarget, NotifyDoc, RetryDoc, decode_run_event, encode, topic_names
from tests.integration.worker.conftest import Scene, eventually, now_utc
from tickwheel import metrics
from tickwheel.signing import verify
from tickwheel.store.buckets import due_run_for
from tickwheel.store.tenants import TenantChange, change_tenant

TWO_TRIES = RetryDoc(max_attempts=2, base_delay_s=0.2, max_delay_s=0.5, jitter=0.0)


def fast_notifications(scene: Scene, **overrides: Any) -> None:
    notify = dataclasses.replace(scene.settings.notify, base_delay_s=0.1, max_delay_s=0.2, **overrides)
    scene.settings = dataclasses.replace(scene.settings, notify=notify)


def events_at(scene: Scene, path: str) -> list[tuple[str, int]]:
    return [(decode_run_event(c.body).type, decode_run_event(c.body).data.attempt) for c in scene.sink.calls_to(path)]


async def test_a_jobs_failed_and_dead_events_reach_its_url_signed_with_stable_ids(scene: Scene) -> None:
    fast_notifications(scene)
    await scene.worker()
    route = NotifyDoc(url=scene.sink.url("/events"), events=("failed", "dead", "succeeded"))
    run = await scene.job(HttpTarget(url=scene.sink.url("/down", status=503)), retry=TWO_TRIES, notify=route)
    await scene.wait_status(run.run_id, "DEAD")
    await scene.sink.wait_for("/events", 3)
    assert sorted(events_at(scene, "/events")) == [("run.dead", 2), ("run.failed", 1), ("run.failed", 2)]
    for call in scene.sink.calls_to("/events"):
        verify(scene.secrets[0], call.headers, call.body, time.time())
        event = decode_run_event(call.body)
        assert call.header("webhook-id") == f"evt_{run.run_id}_{event.data.attempt}_{event.type.removeprefix('run.')}"
        assert event.data.run_id == run.run_id and event.data.tenant_id == scene.tenant
    assert json.loads(scene.sink.calls_to("/events")[0].body)["data"]["status"] in ("RETRY", "DEAD")


async def test_the_tenants_default_route_sends_recovered_after_a_failed_attempt(scene: Scene) -> None:
    fast_notifications(scene)
    await change_tenant(
        scene.store,
        scene.tenant,
        TenantChange(notify_url=scene.sink.url("/tenant-events"), notify_events=frozenset({"recovered"})),
    )
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/flaky", seq="500,200")), retry=TWO_TRIES)
    await scene.wait_status(run.run_id, "SUCCEEDED")
    await scene.sink.wait_for("/tenant-events", 1)
    assert events_at(scene, "/tenant-events") == [("run.recovered", 2)]


async def test_a_failing_notification_url_is_retried_with_the_same_id(scene: Scene) -> None:
    fast_notifications(scene, tries=3)
    await scene.worker()
    retried = NotifyDoc(url=scene.sink.url("/flaky-events", seq="503,503,200"), events=("succeeded",))
    run = await scene.job(HttpTarget(url=scene.sink.url("/ok")), notify=retried)
    await scene.wait_status(run.run_id, "SUCCEEDED")
    calls = await scene.sink.wait_for("/flaky-events", 3)
    assert [c.status for c in calls] == [503, 503, 200]
    assert len({c.header("webhook-id") for c in calls}) == 1


async def test_a_slow_notification_url_never_holds_the_lane(scene: Scene) -> None:
    fast_notifications(scene)
    await scene.worker(concurrency_default=1)
    hold_s = 8.0  # the notification URL answers after this (inside the notifier's 10 s timeout)
    slow = NotifyDoc(url=scene.sink.url("/slow-events", delay_ms=int(hold_s * 1000)), events=("succeeded",))
    first = await scene.job(HttpTarget(url=scene.sink.url("/ok")), notify=slow)
    [notification] = await scene.sink.wait_arrived("/slow-events", 1, timeout_s=30)
    second = await scene.job(HttpTarget(url=scene.sink.url("/ok")))
    await scene.wait_status(second.run_id, "SUCCEEDED", timeout_s=30)
    # Ordering, not speed: the lane's one slot ran the next run while the notification was still unanswered. A
    # notification holding the slot lets the next call arrive only after its answer, however fast the box.
    [call] = [c for c in scene.sink.calls_to("/ok") if c.header("webhook-id") == str(second.run_id)]
    assert call.received_at < notification.received_at + hold_s, "the next run waited for the notification"
    assert (await scene.run_row(first.run_id)).status == "SUCCEEDED"


async def test_a_notification_url_the_egress_policy_refuses_is_never_called(scene: Scene) -> None:
    fast_notifications(scene)
    await scene.worker()
    before = metrics.notifications.labels("succeeded", "failed")._value.get()
    refused = NotifyDoc(url=f"http://10.0.0.1:{scene.sink.port}/events", events=("succeeded",))
    run = await scene.job(HttpTarget(url=scene.sink.url("/ok")), notify=refused)
    await scene.wait_status(run.run_id, "SUCCEEDED")
    await eventually(
        lambda: _async(metrics.notifications.labels("succeeded", "failed")._value.get()), lambda v: v == before + 1
    )
    assert scene.sink.calls_to("/events") == []


async def _async(value: object) -> object:
    return value


async def test_a_missed_message_from_the_reconciler_becomes_a_signed_missed_event(scene: Scene) -> None:
    fast_notifications(scene)
    await scene.worker()
    route = NotifyDoc(url=scene.sink.url("/missed-events"), events=("missed",))
    later = now_utc() + timedelta(hours=1)  # the run itself is never fired: only the reconciler's message is
    run = await scene.job(HttpTarget(url=scene.sink.url("/never")), notify=route, at=later)
    missed = msgspec.structs.replace(due_run_for(run, kind="missed"), missed_reason="too_old")
    await scene.producer.send(topic_names(scene.settings.kafka.topic_prefix)["default"], encode(missed))
    [call] = await scene.sink.wait_for("/missed-events", 1)
    verify(scene.secrets[0], call.headers, call.body, time.time())
    event = decode_run_event(call.body)
    assert (event.type, event.data.status, event.data.error) == ("run.missed", "MISSED", "missed: too_old")
    assert event.data.run_id == run.run_id and call.header("webhook-id") == f"evt_{run.run_id}_0_missed"
    assert scene.sink.calls_to("/never") == [] and (await scene.run_row(run.run_id)).status == "SCHEDULED"
