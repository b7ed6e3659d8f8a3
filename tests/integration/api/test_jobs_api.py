"""Jobs through the HTTP API on the real Cassandra, Kafka and Redis."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from api_bodies import cron_job, once_job
from conftest import Caller

from schemas.messages import decode_due_run, topic_names
from tickwheel.bus.kafka import KafkaConsumer
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore


async def test_create_answers_201_after_the_job_and_its_first_run_are_written(alice: Caller, store: CassandraStore):
    response = await alice.call("POST", "/v1/jobs", json=cron_job())
    assert response.status == 201, await response.text()
    job = await response.json()
    assert response.headers["ETag"] == '"1"'
    assert job["state"] == "ACTIVE" and job["version"] == 1
    assert job["schedule"]["expr"] == "0 9 * * *" and job["payload"] == {"report": "daily"}
    next_run_at = datetime.fromisoformat(job["next_run_at"])
    assert next_run_at.utcoffset() == timedelta(0)
    assert next_run_at > datetime.now(UTC)
    job_id = uuid.UUID(job["id"])
    run_id = run_id_for(job_id, next_run_at)
    runs = await store.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    assert runs[0]["status"] == "SCHEDULED" and runs[0]["shard"] == shard_of(job_id)
    history = await store.execute("SELECT run_id FROM runs_by_job WHERE job_id = ?", [job_id])
    assert [r["run_id"] for r in history] == [run_id]
    bucket = next_run_at.replace(second=0, microsecond=0)
    rows = await store.execute(
        "SELECT run_id FROM runs_by_bucket WHERE bucket = ? AND shard = ?", [bucket, shard_of(job_id)]
    )
    assert run_id in [r["run_id"] for r in rows]
    listed = await store.execute("SELECT job_id FROM jobs_by_tenant WHERE tenant_id = ?", [alice.tenant_id])
    assert [r["job_id"] for r in listed] == [job_id]


async def test_a_run_due_inside_the_horizon_is_announced_on_the_near_topic(alice: Caller, settings: Settings):
    topic = topic_names(settings.kafka.topic_prefix)["near"]
    consumer = KafkaConsumer(settings.kafka)
    ends = await consumer.end_offsets(topic, range(settings.kafka.near_partitions))
    run_at = datetime.now(UTC) + timedelta(seconds=30)
    response = await alice.call("POST", "/v1/jobs", json=once_job(run_at))
    assert response.status == 201
    job = await response.json()
    await consumer.assign([(topic, p, ends[p]) for p in ends])
    found = []
    for _ in range(20):
        found += [decode_due_run(r.value) for r in await consumer.poll(timeout_s=0.5)]
        if any(str(d.job_id) == job["id"] for d in found):
            break
    await consumer.close()
    announced = [d for d in found if str(d.job_id) == job["id"]]
    assert len(announced) == 1
    assert announced[0].tenant_id == alice.tenant_id and announced[0].kind == "run" and announced[0].attempt == 0
    assert announced[0].scheduled_at_ms == int(run_at.timestamp() * 1000)
