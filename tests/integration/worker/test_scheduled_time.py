"""The scheduled time in the call: headers on HTTP and Kafka targets, and opt-in payload templates (real servers)."""

from __future__ import annotations

import json
from datetime import timedelta

from schemas.messages import HttpTarget, KafkaTarget
from tests.integration.worker.conftest import Scene, eventually, now_utc
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, ensure_topics


async def test_an_http_call_carries_the_occurrence_instant_not_the_fire_time_and_the_run_id(scene: Scene) -> None:
    await scene.worker()
    scheduled = now_utc() - timedelta(seconds=20)
    run = await scene.job(HttpTarget(url=scene.sink.url("/late", seq="500,200")), at=scheduled)
    calls = await scene.sink.wait_for("/late", 2)
    expected = run.scheduled_at.isoformat(timespec="milliseconds")
    assert [c.header("X-Tickwheel-Scheduled-At") for c in calls] == [expected, expected]
    assert {c.header("X-Tickwheel-Run-Id") for c in calls} == {str(run.run_id)}
    assert [c.header("X-Tickwheel-Attempt") for c in calls] == ["1", "2"]
    assert calls[0].body == b'{"hello": "world"}'  # not templated unless the job opts in


async def test_a_templated_payload_is_rendered_per_attempt_in_the_jobs_zone(scene: Scene) -> None:
    await scene.worker()
    payload = json.dumps(
        {"when": "{{scheduled_at}}", "local": "{{scheduled_at_local}}", "try": "{{attempt}}", "n": 3,
         "who": ["{{job_name}}", "{{job_id}}", "{{run_id}}"], "{{run_id}}": "keys stay"}
    )  # fmt: skip
    run = await scene.job(
        HttpTarget(url=scene.sink.url("/tpl", seq="503,200")), payload=payload, payload_template=True, name="nightly"
    )
    calls = await scene.sink.wait_for("/tpl", 2)
    bodies = [json.loads(c.body) for c in calls]
    when = run.scheduled_at.isoformat(timespec="milliseconds")
    assert bodies[0] == {
        "when": when, "local": when, "try": "1", "n": 3,
        "who": ["nightly", str(run.job_id), str(run.run_id)], "{{run_id}}": "keys stay",
    }  # fmt: skip
    assert bodies[1]["try"] == "2"
    await scene.wait_status(run.run_id, "SUCCEEDED")


async def test_a_kafka_target_gets_the_same_headers_and_a_rendered_payload(scene: Scene) -> None:
    topic = f"{scene.tenant}.ticks"
    await ensure_topics(scene.settings.kafka, {topic: 1})
    await scene.worker()
    run = await scene.job(KafkaTarget(topic=topic), payload='{"at": "{{scheduled_at}}"}', payload_template=True)
    await scene.wait_status(run.run_id, "SUCCEEDED")
    consumer = KafkaConsumer(scene.settings.kafka)
    await consumer.assign([(topic, 0, OFFSET_BEGINNING)])
    [record] = await eventually(lambda: consumer.poll(10, 0.5), bool)
    await consumer.close()
    headers = dict(record.headers)
    when = run.scheduled_at.isoformat(timespec="milliseconds")
    assert headers["X-Tickwheel-Scheduled-At"] == when.encode()
    assert headers["X-Tickwheel-Run-Id"] == str(run.run_id).encode()
    assert headers["X-Tickwheel-Attempt"] == b"1"
    assert json.loads(record.value) == {"at": when}
